// Package services holds Ferry's commands, one directory each. Its tests
// keep the documentation true to them: docs/configuration.md's flag
// tables row for row against each command's flags, and docs/metrics.md
// against the metrics each command registers.
package services
