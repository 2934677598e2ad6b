//go:build tools

// Package tools records the main packages this module builds, so `go mod tidy`
// keeps their dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
