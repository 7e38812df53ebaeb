//go:build tools

// Package tools names the commands built from this module, so that `go mod tidy` keeps their
// dependencies. It is never compiled (the build tag is never set).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
