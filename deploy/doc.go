// Package deploy holds no code. Its tests check the deployment files beside
// it, which no cluster runs during development: every Kubernetes object in
// kubernetes/ decodes strictly into k8s.io/api's types, and the Nomad job in
// nomad/ parses with HashiCorp's HCL and uses only the names nomad/api's
// types declare. A misspelt field would otherwise surface only when an
// operator applied the file. The router (router/nginx.conf) is run under
// nginx by cmd/cellvm/router_test.go, in front of real `cellvm serve`
// processes.
package deploy
