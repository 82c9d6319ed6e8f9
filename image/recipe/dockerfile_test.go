package recipe

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

func TestParseDockerfile(t *testing.T) {
	ctx := "/ctx"
	src := `# syntax=docker/dockerfile:1
FROM team
ENV A=1 B="two words" \
    C=${A}x
ENV D the rest of it
# a comment inside
RUN apt-get update && \
    # a comment in a continuation
    apt-get install -y jq

RUN ["python3", "-c", "print('hi')"]
WORKDIR /srv
WORKDIR app
COPY requirements.txt .
COPY src/ /opt/src
COPY a b /etc/x/
USER 1000:1000
CMD ["python3"]
EXPOSE 8080
`
	d, err := Parse(strings.NewReader(src), ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.ImageRecipe{Base: "team", Steps: []sandbox.RecipeStep{
		{Env: []string{"A=1", "B=two words", "C=1x"}},
		{Env: []string{"D=the rest of it"}},
		{Run: "apt-get update &&     apt-get install -y jq"},
		{Run: `python3 -c 'print('\''hi'\'')'`},
		{Run: "mkdir -p -- /srv"},
		{WorkingDir: "/srv"},
		{Run: "mkdir -p -- /srv/app"},
		{WorkingDir: "/srv/app"},
		{CopyFrom: "copy/0", CopyTo: "/srv/app/requirements.txt"},
		{CopyFrom: "copy/1", CopyTo: "/opt/src"},
		{CopyFrom: "copy/2", CopyTo: "/etc/x/a"},
		{CopyFrom: "copy/3", CopyTo: "/etc/x/b"},
		{User: "1000:1000"},
	}}
	if !reflect.DeepEqual(d.Recipe, want) {
		t.Errorf("recipe:\n%+v\nwant\n%+v", d.Recipe, want)
	}
	wantFiles := []ArchiveFile{{"/ctx/requirements.txt", "copy/0"}, {"/ctx/src", "copy/1"}, {"/ctx/a", "copy/2"}, {"/ctx/b", "copy/3"}}
	if !reflect.DeepEqual(d.Files, wantFiles) {
		t.Errorf("files %+v, want %+v", d.Files, wantFiles)
	}
	if len(d.Notices) != 2 || !strings.Contains(d.Notices[0], "line 18: CMD ignored") {
		t.Errorf("notices %q", d.Notices)
	}
	rc, files, err := ParseDockerfile(strings.NewReader("from default\nrun true\n"), ctx)
	if err != nil || rc.Base != "" || len(files) != 0 || len(rc.Steps) != 1 {
		t.Errorf("FROM default: %+v %v %v", rc, files, err)
	}
}

func TestParseDockerfileRefuses(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"RUN true\n", "line 1: RUN before FROM"},
		{"ARG V=1\nFROM team\n", "line 1: ARG is not supported"},
		{"FROM team\nARG V=1\n", "line 2: ARG is not supported"},
		{"FROM team AS build\nRUN true\n", "multi-stage"},
		{"FROM team\nFROM team\n", "line 2: a second FROM"},
		{"FROM python:3.12-slim\nRUN true\n", "cellvm image pull python:3.12-slim --name python-3.12-slim"},
		{"FROM --platform=linux/arm64 team\n", "--platform"},
		{"FROM Team\nRUN true\n", "not a cellvm image name"},
		{"FROM team\nCOPY --from=build /a /b\n", "line 2: COPY --from"},
		{"FROM team\nCOPY --chown=1:1 a /b\n", "--chown is not supported"},
		{"FROM team\nADD https://example.com/x.tgz /x\n", "ADD from a URL"},
		{"FROM team\nADD x.tar.gz /x\n", "would unpack"},
		{"FROM team\nCOPY ../secret /x\n", "leaves the build context"},
		{"FROM team\nCOPY a/../../secret /x\n", "leaves the build context"},
		{"FROM team\nCOPY *.py /x/\n", "wildcards"},
		{"FROM team\nCOPY a b /x\n", "must end with /"},
		{"FROM team\nCOPY a\n", "want COPY SRC... DEST"},
		{"FROM team\nENV PATH=/opt/bin:$PATH\n", "$PATH is not set by this Dockerfile's ENV"},
		{"FROM team\nENV A=\"x\n", "unterminated"},
		{"FROM team\nRUN <<EOF\necho\nEOF\n", "heredoc"},
		{"FROM team\nSHELL [\"/bin/bash\"]\n", "SHELL is not supported"},
		{"FROM team\nFOO bar\n", `unknown instruction "FOO"`},
		{"FROM team\nUSER a b\n", "want USER"},
		{"FROM team\nUSER root;rm\n", "user"},
		{"FROM team\nENV 1A=x\n", "env entry"},
		{"FROM team\n", "nothing to build"},
		{"# only\n", "no FROM"},
		{"FROM team\nRUN a\x00b\n", "NUL"},
	} {
		_, _, err := ParseDockerfile(strings.NewReader(c.src), "/ctx")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.src, err, c.want)
		}
	}
	big := "FROM team\n" + strings.Repeat("RUN true\n", sandbox.MaxRecipeSteps+1)
	if _, _, err := ParseDockerfile(strings.NewReader(big), "/ctx"); err == nil || !strings.Contains(err.Error(), "steps") {
		t.Errorf("too many steps: %v", err)
	}
	var le *LineError
	if _, _, err := ParseDockerfile(strings.NewReader("FROM team\n\nRUN true\nBOGUS\n"), "/ctx"); !errors.As(err, &le) || le.Line != 4 {
		t.Errorf("line of the error: %v", err)
	}
}

func TestImageNameFor(t *testing.T) {
	for in, want := range map[string]string{
		"python:slim":                   "python-slim",
		"python:3.12-slim":              "python-3.12-slim",
		"ghcr.io/Org/app:1.0":           "ghcr.io-org-app-1.0",
		"alpine@sha256:abc":             "alpine-sha256-abc",
		"/x":                            "x",
		"default":                       "",
		"!!!":                           "",
		strings.Repeat("a", 100) + ":1": strings.Repeat("a", sandbox.MaxWorkspaceName),
	} {
		if got := ImageNameFor(in); got != want {
			t.Errorf("ImageNameFor(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseDockerfile: no input panics, and whatever parses is a valid
// recipe whose files stay in the context, each at its own archive path,
// named by a copy step.
func FuzzParseDockerfile(f *testing.F) {
	for _, s := range []string{
		"FROM team\nRUN true\n",
		"FROM default\nENV A=1 B=\"x y\"\nWORKDIR a\nCOPY . /\nUSER 1\n",
		"FROM x\nCOPY [\"a b\", \"c\", \"/d/\"]\nRUN [\"echo\", \"'\"]\n",
		"FROM x\\\n\nRUN a\\\n#c\n b\nENV K v w\nENV L=${K}\n",
		"FROM team\nADD ../a /b\n",
	} {
		f.Add(s)
	}
	ctx := "/ctx"
	f.Fuzz(func(t *testing.T, src string) {
		d, err := Parse(strings.NewReader(src), ctx)
		if err != nil {
			return
		}
		if err := d.Recipe.Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid recipe: %v", src, err)
		}
		named := map[string]bool{}
		for _, st := range d.Recipe.Steps {
			if st.CopyFrom != "" {
				named[st.CopyFrom] = true
			}
		}
		seen := map[string]bool{}
		for _, af := range d.Files {
			rel, err := filepath.Rel(ctx, af.Src)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("%q: file %s leaves the context", src, af.Src)
			}
			if seen[af.Dst] || !named[af.Dst] {
				t.Fatalf("%q: archive path %s twice or named by no step", src, af.Dst)
			}
			seen[af.Dst] = true
		}
	})
}
