// Package cell holds the result contract that every layer of cellvm keeps:
// the guest's interpreter supervisor produces it, the agent carries it over
// vsock, the API hands it to clients, and a language model reads it.
//
// The shapes follow DESIGN.md ("The result of a cell"). They live in their
// own package, with no dependencies beyond the standard library, so the guest
// init and the host daemon share one definition and cannot drift apart.
//
// The package also holds Clipper, the head+tail buffer used by everyone who
// collects output: a cell that prints a gigabyte must not cost a gigabyte of
// memory anywhere, and a model is better served by the start and the end of
// long output, with the amount cut stated, than by either alone.
//
// ResultJSON and EventJSON encode a result in one pass, straight to a
// connection, with encoding/json's exact bytes: a maximal result is ~66 MiB
// of JSON, and encoding/json's copies of it would be the daemon's largest
// transient cost per cell (resultjson.go).
package cell
