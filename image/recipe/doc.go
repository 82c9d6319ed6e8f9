// Package recipe turns what a user writes into a cellvm image recipe
// (sandbox.ImageRecipe) and the files it needs into the request's
// archive.
//
// ParseDockerfile reads a subset of the Dockerfile language: FROM (a
// cellvm image: "default", or one built, pulled or imported), RUN (shell
// or JSON form), COPY and local ADD (sources in the build context, which
// they cannot leave), ENV, WORKDIR and USER, with comments and line
// continuations. It is pure: it reads no file, so the CLI and any front
// end can parse a Dockerfile without trusting it, and it is fuzzed.
// Instructions that only describe how a container starts (CMD,
// ENTRYPOINT, EXPOSE, LABEL, VOLUME, STOPSIGNAL, HEALTHCHECK, MAINTAINER)
// are ignored with a notice: a cellvm sandbox starts its own guest.
// What would build something else than the file says is refused, with
// the line: ARG and variables the file does not set (cellvm cannot know
// the base image's environment when it parses), multi-stage builds (FROM
// ... AS, COPY --from), ADD from a URL or of an archive (Docker would
// fetch or unpack it), COPY --chown/--chmod (copies are root's, modes
// kept), wildcards, heredocs, SHELL and ONBUILD.
//
// WriteArchive packs the local files a recipe names (ArchiveFile) into
// the tar the API takes as the recipe's archive: modes kept, symbolic
// links kept as links, devices, sockets and FIFOs refused, nothing
// outside the directories named (a link is never followed out of its
// tree), and the whole bounded.
package recipe
