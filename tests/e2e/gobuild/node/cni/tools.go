//go:build tools

// Package tools names the commands built from this module, so that `go mod tidy` keeps their
// dependencies. It is never compiled (the build tag is never set).
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)
