// Package clients is the Go side of cellvm's Python and JavaScript clients
// (clients/python, clients/js). It holds the one thing the clients must not
// restate by hand, the run_python tool definition, which is generated from
// package agent into a JSON file that each client reads (go generate
// ./clients; a test fails when the files drift), and the tests that run
// both clients' own test suites, examples and formatters against the
// daemon's HTTP server over a fake manager, and, in the nested rig,
// against the real daemon and real microVMs.
package clients

//go:generate go run ./gentooldef
