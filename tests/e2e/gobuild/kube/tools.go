//go:build tools

// Package tools names the commands built from this module, so that `go mod tidy` keeps
// their dependencies. It is never compiled (the build tag is never set).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
