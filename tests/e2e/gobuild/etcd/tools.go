//go:build tools

// Package tools names the etcd server command (package main at the module root), so that
// `go mod tidy` keeps its dependencies. It is never compiled.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
