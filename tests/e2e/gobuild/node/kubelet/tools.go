//go:build tools

// Package tools names the command built from this module, so that `go mod tidy` keeps its
// dependencies. It is never compiled (the build tag is never set).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
