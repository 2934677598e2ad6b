//go:build tools

// Package tools records the main package this module builds.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
