// Package doclinks holds the test that keeps the project's front door
// honest: README.md and docs/*.md link only files that are in the
// repository. A user who clones cellvm has the repository and nothing
// beside it, so a link to a file outside it (../shared/DESIGN.md) or to
// one that moved is a dead end; the test fails on either, and on an
// anchor (#section) that names no heading of the file it points into.
package doclinks
