// Package deploytest holds the tests that keep Ferry's deployment files
// honest: the kustomize overlays under deploy/kubernetes, the docker-compose
// stack under deploy/compose, the Grafana dashboard and the Prometheus rules
// are checked against the binaries' real flag sets, ports and image.
package deploytest
