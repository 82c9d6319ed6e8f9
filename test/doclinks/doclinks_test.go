package doclinks

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/cellvm/cellvm/test/kvmtest"
)

var (
	// linkRE is an inline link or image: [text](target "title").
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refRE is a reference definition: [label]: target.
	refRE = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// codeRE is an inline code span on one line.
	codeRE = regexp.MustCompile("`([^`\n]+)`")
	// schemeRE starts a URL (https:, mailto:): not a file.
	schemeRE  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	headingRE = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$`)
)

// withoutFences blanks the lines of fenced code blocks (``` or ~~~),
// keeping the line count, so their text is not read as links.
func withoutFences(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		fence := strings.HasPrefix(strings.TrimLeft(l, " "), "```") || strings.HasPrefix(strings.TrimLeft(l, " "), "~~~")
		if fence || in {
			lines[i] = ""
		}
		if fence {
			in = !in
		}
	}
	return strings.Join(lines, "\n")
}

// slug is GitHub's anchor for a heading: lower case, markup and
// punctuation dropped, spaces as hyphens.
func slug(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors are the headings' anchors of a Markdown file.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(withoutFences(text), -1) {
		out[slug(m[1])] = true
	}
	return out
}

// inside reports whether path is root or below it.
func inside(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// problems lists what is wrong with the links of file (a path under
// root) whose text is text: each as "file:line: target: why".
func problems(root, file, text string) []string {
	var out []string
	body := withoutFences(text)
	rel, _ := filepath.Rel(root, file)
	at := func(offset int, target, why string) {
		line := strings.Count(body[:offset], "\n") + 1
		out = append(out, rel+":"+strconv.Itoa(line)+": "+target+": "+why)
	}
	// Links: relative to the file, inside the repository, existing, and
	// an anchor naming a heading of the Markdown file they point into.
	var links [][]int
	links = append(links, linkRE.FindAllStringSubmatchIndex(body, -1)...)
	links = append(links, refRE.FindAllStringSubmatchIndex(body, -1)...)
	for _, m := range links {
		target := body[m[2]:m[3]]
		if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
			continue
		}
		p, frag, _ := strings.Cut(target, "#")
		if u, err := url.PathUnescape(p); err == nil {
			p = u
		}
		dest := file
		if p != "" {
			if filepath.IsAbs(p) {
				at(m[2], target, "an absolute path: link a file of the repository by its path relative to this one")
				continue
			}
			dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(p))
			if !inside(root, dest) {
				at(m[2], target, "outside the repository: a user who clones it does not have this file")
				continue
			}
			if _, err := os.Stat(dest); err != nil {
				at(m[2], target, "no such file in the repository")
				continue
			}
		}
		if frag != "" && strings.HasSuffix(dest, ".md") {
			b, err := os.ReadFile(dest)
			if dest == file {
				b, err = []byte(text), nil
			}
			if err == nil && !anchors(string(b))[frag] {
				at(m[2], target, "no heading of "+filepath.Base(dest)+" has the anchor #"+frag)
			}
		}
	}
	// Files named in code spans: a path that climbs out (../x) or a
	// Markdown file must be a file of the repository, relative to this
	// file or to the repository's root.
	for _, m := range codeRE.FindAllStringSubmatchIndex(body, -1) {
		span := body[m[2]:m[3]]
		if strings.ContainsAny(span, " *$<>{}|~") || schemeRE.MatchString(span) || strings.HasPrefix(span, "/") {
			continue
		}
		if !strings.HasPrefix(span, "../") && !strings.HasPrefix(span, "./") && !strings.HasSuffix(span, ".md") {
			continue
		}
		p, _, _ := strings.Cut(span, "#")
		found := false
		for _, dest := range []string{filepath.Join(filepath.Dir(file), filepath.FromSlash(p)), filepath.Join(root, filepath.FromSlash(p))} {
			if _, err := os.Stat(dest); err == nil && inside(root, dest) {
				found = true
			}
		}
		if !found {
			at(m[2], span, "names a file that is not in the repository")
		}
	}
	return out
}

// frontDoor lists README.md and docs/*.md.
func frontDoor(t *testing.T, root string) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, docs...)
}

// TestFrontDoorLinksResolve: README.md and every docs/*.md link and name
// only files of the repository, and their anchors name headings.
func TestFrontDoorLinksResolve(t *testing.T) {
	root := kvmtest.RepoRoot(t)
	files := frontDoor(t, root)
	if len(files) < 4 {
		t.Errorf("README.md and docs/*.md are %d files; docs/ should hold design.md, testing.md and benchmarks.md", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems(root, f, string(b)) {
			t.Error(p)
		}
	}
}

// TestFrontDoorFiles: the files a user looks for beside the README.
func TestFrontDoorFiles(t *testing.T) {
	root := kvmtest.RepoRoot(t)
	for _, name := range []string{"LICENSE", "CHANGELOG.md", "docs/design.md", "docs/testing.md", "docs/benchmarks.md"} {
		if st, err := os.Stat(filepath.Join(root, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "LICENSE")); !strings.Contains(string(b), "Apache License") || !strings.Contains(string(b), "Version 2.0, January 2004") {
		t.Error("LICENSE is not the Apache License 2.0 (clients/js/package.json says Apache-2.0)")
	}
}

// TestCheckerFindsBrokenLinks: the checker itself reports a link out of
// the repository (as a link and as a code span), a missing file, a
// missing anchor and an absolute path, and passes good ones.
func TestCheckerFindsBrokenLinks(t *testing.T) {
	root := kvmtest.RepoRoot(t)
	text := "# Title\n\n## Two words\n\n" +
		"The map is in `../shared/DESIGN.md`.\n" + // 5
		"See [the design](../shared/DESIGN.md).\n" + // 6
		"See [gone](docs/no-such-file.md).\n" + // 7
		"See [a section](README.md#no-such-heading).\n" + // 8
		"See [root](/etc/passwd).\n" + // 9
		"Fine: [readme](README.md), [here](#two-words), [web](https://example.com/x.md), `go.mod`, `api/openapi.json`,\n" +
		"`test/doclinks/doc.go`, [ref].\n\n" +
		"```\n[fenced](../nowhere.md)\n```\n\n" +
		"[ref]: go.mod\n"
	got := problems(root, filepath.Join(root, "README.md"), text)
	want := []string{
		"README.md:5: ../shared/DESIGN.md: ",
		"README.md:6: ../shared/DESIGN.md: outside the repository",
		"README.md:7: docs/no-such-file.md: no such file",
		"README.md:8: README.md#no-such-heading: no heading",
		"README.md:9: /etc/passwd: an absolute path",
	}
	if len(got) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		ok := false
		for _, g := range got {
			if strings.HasPrefix(g, w) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("no problem %q among:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if s := slug("The `cellvm` API: routes, errors (v1)"); s != "the-cellvm-api-routes-errors-v1" {
		t.Errorf("slug %q", s)
	}
}
