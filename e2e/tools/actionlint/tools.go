//go:build tools

// Package tools records the main package this module builds.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
