package recipe

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// MaxDockerfileBytes bounds a Dockerfile.
const MaxDockerfileBytes = 1 << 20

// ArchiveFile is a local file or directory a recipe needs: Src on this
// host goes into the request's archive at Dst.
type ArchiveFile struct {
	Src string
	Dst string
}

// Dockerfile is what ParseDockerfile makes of a Dockerfile.
type Dockerfile struct {
	Recipe sandbox.ImageRecipe
	Files  []ArchiveFile
	// Notices are the instructions ignored, one line each, for the user.
	Notices []string
	// intoDir are the copies of a source into a directory DEST, whose
	// CopyTo depends on whether the source is a directory (ResolveDirs).
	intoDir []copyRef
}

// copyRef is a copy step of a source that may be a directory.
type copyRef struct {
	file, step int
	dir        string // DEST: where a directory's contents go
}

// ResolveDirs looks at the copied sources that may be directories: a
// directory's contents go to DEST itself (Docker's rule), a file into
// it under its own name. It is the one part that reads the file
// system; ParseDockerfile's callers that pack the files call it first.
func (d *Dockerfile) ResolveDirs() error {
	for _, c := range d.intoDir {
		info, err := os.Lstat(d.Files[c.file].Src)
		if err != nil {
			return fmt.Errorf("%w: COPY: %v", ErrBadInput, err)
		}
		if info.IsDir() {
			d.Recipe.Steps[c.step].CopyTo = c.dir
		}
	}
	d.intoDir = nil
	return nil
}

// ParseDockerfile reads a Dockerfile whose build context is contextDir
// (COPY's sources are relative to it and must stay in it) and returns
// the recipe and the files its archive holds. Notices of ignored
// instructions are left out; Parse returns them.
func ParseDockerfile(r io.Reader, contextDir string) (sandbox.ImageRecipe, []ArchiveFile, error) {
	d, err := Parse(r, contextDir)
	if err != nil {
		return sandbox.ImageRecipe{}, nil, err
	}
	return d.Recipe, d.Files, nil
}

// LineError is a Dockerfile's error at a line.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("Dockerfile line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// instruction is one logical line: continuations joined.
type instruction struct {
	line int // where it begins
	cmd  string
	args string
}

// parser holds the state across instructions.
type parser struct {
	contextDir string
	d          Dockerfile
	from       bool
	workdir    string
	env        map[string]string
}

// Parse is ParseDockerfile with the notices.
func Parse(r io.Reader, contextDir string) (*Dockerfile, error) {
	ins, err := split(r)
	if err != nil {
		return nil, err
	}
	p := &parser{contextDir: contextDir, workdir: "/", env: map[string]string{}}
	for _, in := range ins {
		if err := p.instruction(in); err != nil {
			var le *LineError
			if errors.As(err, &le) {
				return nil, err
			}
			return nil, &LineError{Line: in.line, Err: err}
		}
	}
	if !p.from {
		return nil, errors.New("Dockerfile: no FROM: the file must begin with FROM IMAGE (a cellvm image: default, or one built, pulled or imported)")
	}
	if len(p.d.Recipe.Steps) == 0 {
		return nil, errors.New("Dockerfile: nothing to build: no RUN, COPY, ENV, WORKDIR or USER")
	}
	if err := p.d.Recipe.ValidateSteps(); err != nil {
		return nil, fmt.Errorf("Dockerfile: %w", err)
	}
	return &p.d, nil
}

// split reads the logical lines: comments and blank lines dropped,
// continuations (a line ending in a backslash) joined.
func split(r io.Reader) ([]instruction, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxDockerfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the Dockerfile: %w", err)
	}
	if len(b) > MaxDockerfileBytes {
		return nil, fmt.Errorf("the Dockerfile is larger than %d bytes", MaxDockerfileBytes)
	}
	if strings.IndexByte(string(b), 0) >= 0 {
		return nil, errors.New("the Dockerfile holds a NUL byte: not a text file")
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 0, 64<<10), MaxDockerfileBytes+1)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \t\r")
		trimmed := strings.TrimLeft(line, " \t")
		if strings.HasPrefix(trimmed, "#") || trimmed == "" && cur.Len() > 0 {
			continue // a comment, or a blank line inside a continuation
		}
		if trimmed == "" {
			continue
		}
		if cur.Len() == 0 {
			start = n
		} else {
			trimmed = line // a continuation keeps its indent, as Docker's does
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`))
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, makeInstruction(start, cur.String()))
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the Dockerfile: %w", err)
	}
	if cur.Len() > 0 {
		out = append(out, makeInstruction(start, cur.String()))
	}
	return out, nil
}

func makeInstruction(line int, s string) instruction {
	s = strings.TrimSpace(s)
	cmd, args, _ := strings.Cut(s, " ")
	if i := strings.IndexByte(cmd, '\t'); i >= 0 {
		cmd, args = cmd[:i], cmd[i+1:]+" "+args
	}
	return instruction{line: line, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
}

func (p *parser) instruction(in instruction) error {
	if !p.from && in.cmd != "FROM" {
		if in.cmd == "ARG" {
			return errors.New("ARG is not supported (cellvm's recipes have no build arguments): write the value out")
		}
		return fmt.Errorf("%s before FROM: the file must begin with FROM IMAGE", clip(in.cmd))
	}
	switch in.cmd {
	case "FROM":
		return p.fromImage(in.args)
	case "RUN":
		return p.run(in.args)
	case "COPY":
		return p.copy(in.args, false)
	case "ADD":
		return p.copy(in.args, true)
	case "ENV":
		return p.setEnv(in.args)
	case "WORKDIR":
		return p.setWorkdir(in.args)
	case "USER":
		return p.setUser(in.args)
	case "CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "MAINTAINER":
		p.d.Notices = append(p.d.Notices, fmt.Sprintf("Dockerfile line %d: %s ignored: a cellvm sandbox starts its own guest (cells and commands), not the image's program", in.line, in.cmd))
		return nil
	case "ARG":
		return errors.New("ARG is not supported (cellvm's recipes have no build arguments): write the value out")
	case "SHELL", "ONBUILD":
		return fmt.Errorf("%s is not supported: RUN runs with sh -c", in.cmd)
	}
	return fmt.Errorf("unknown instruction %q", clip(in.cmd))
}

func (p *parser) fromImage(args string) error {
	if p.from {
		return errors.New("a second FROM: multi-stage builds are not supported (one FROM, a cellvm image)")
	}
	words, err := splitWords(args)
	if err != nil {
		return err
	}
	if len(words) > 0 && strings.HasPrefix(words[0], "--") {
		return fmt.Errorf("FROM %s is not supported (the guest runs linux/amd64)", clip(words[0]))
	}
	if len(words) == 3 && strings.EqualFold(words[1], "AS") {
		return errors.New("FROM ... AS: multi-stage builds are not supported")
	}
	if len(words) != 1 {
		return errors.New("want FROM IMAGE")
	}
	base := words[0]
	if strings.ContainsAny(base, ":/@") {
		return fmt.Errorf("FROM %s: FROM names a cellvm image; pull it first (cellvm image pull %s --name %s) and write FROM %s",
			clip(base), clip(base), ImageNameFor(base), ImageNameFor(base))
	}
	if !sandbox.ValidImageName(base) {
		return fmt.Errorf("FROM %q: not a cellvm image name (1 to %d of a-z, 0-9, '-', '_', '.', starting with a letter or digit)", clip(base), sandbox.MaxWorkspaceName)
	}
	if base != sandbox.DefaultImage {
		p.d.Recipe.Base = base
	}
	p.from = true
	return nil
}

// ImageNameFor is the cellvm image name a pulled reference is given by
// convention: lower case, with '/', ':' and '@' made '-' ("python:slim"
// is "python-slim", "ghcr.io/a/b:1" "ghcr.io-a-b-1"), clipped to the
// longest name; "" when nothing valid is left.
func ImageNameFor(ref string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(ref) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		case r == '/', r == ':', r == '@':
			b.WriteByte('-')
		}
	}
	name := strings.TrimLeft(b.String(), "-_.")
	if len(name) > sandbox.MaxWorkspaceName {
		name = name[:sandbox.MaxWorkspaceName]
	}
	if !sandbox.ValidImageName(name) || name == sandbox.DefaultImage {
		return ""
	}
	return name
}

func (p *parser) add(st sandbox.RecipeStep) error {
	if len(p.d.Recipe.Steps) >= sandbox.MaxRecipeSteps {
		return fmt.Errorf("more than %d steps", sandbox.MaxRecipeSteps)
	}
	if err := (sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{st}}).ValidateSteps(); err != nil {
		return err
	}
	p.d.Recipe.Steps = append(p.d.Recipe.Steps, st)
	return nil
}

func (p *parser) run(args string) error {
	if strings.Contains(args, "<<") && heredocRE(args) {
		return errors.New("RUN with a heredoc (<<) is not supported: put the script in a file, COPY it and RUN it")
	}
	if strings.HasPrefix(args, "--") {
		return fmt.Errorf("RUN %s is not supported", clip(strings.Fields(args)[0]))
	}
	cmd := args
	if argv, ok := jsonForm(args); ok {
		if len(argv) == 0 {
			return errors.New("RUN []: no command")
		}
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = shellQuote(a)
		}
		cmd = strings.Join(q, " ")
	}
	if strings.TrimSpace(cmd) == "" {
		return errors.New("RUN without a command")
	}
	return p.add(sandbox.RecipeStep{Run: cmd})
}

// heredocRE reports whether args starts a heredoc (<<WORD or <<-WORD, as
// BuildKit reads them).
func heredocRE(args string) bool {
	for i := 0; i+2 < len(args); i++ {
		if args[i] == '<' && args[i+1] == '<' {
			rest := strings.TrimPrefix(args[i+2:], "-")
			rest = strings.TrimLeft(rest, `"'`)
			if rest != "" && (rest[0] == '_' || rest[0] >= 'A' && rest[0] <= 'Z' || rest[0] >= 'a' && rest[0] <= 'z') {
				return true
			}
		}
	}
	return false
}

// jsonForm reads the JSON array form of RUN and COPY.
func jsonForm(args string) ([]string, bool) {
	if !strings.HasPrefix(args, "[") {
		return nil, false
	}
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		return nil, false
	}
	return argv, true
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (p *parser) copy(args string, isAdd bool) error {
	what := "COPY"
	if isAdd {
		what = "ADD"
	}
	words, ok := jsonForm(args)
	if !ok {
		var err error
		if words, err = splitWords(args); err != nil {
			return err
		}
	}
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		flag, _, _ := strings.Cut(words[0], "=")
		switch flag {
		case "--from":
			return fmt.Errorf("%s --from: multi-stage builds are not supported", what)
		case "--chown", "--chmod":
			return fmt.Errorf("%s %s is not supported: copied files are root's, their modes kept (chown or chmod them in a RUN)", what, flag)
		case "--link":
			words = words[1:] // a layer-caching hint: nothing to do here
			continue
		}
		return fmt.Errorf("%s %s is not supported", what, clip(flag))
	}
	if len(words) < 2 {
		return fmt.Errorf("want %s SRC... DEST", what)
	}
	srcs, dest := words[:len(words)-1], words[len(words)-1]
	dest, err := p.expand(dest)
	if err != nil {
		return err
	}
	dirDest := strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.")
	if len(srcs) > 1 && !dirDest {
		return fmt.Errorf("%s of several sources: DEST %q must end with /", what, clip(dest))
	}
	destAbs := dest
	if !path.IsAbs(destAbs) {
		destAbs = path.Join(p.workdir, destAbs)
	}
	destAbs = path.Clean(destAbs)
	for _, src := range srcs {
		if isAdd && (strings.Contains(src, "://") || strings.HasPrefix(src, "git@")) {
			return fmt.Errorf("ADD %s: ADD from a URL is not supported (nothing is fetched at build time from the build host); download it and COPY it", clip(src))
		}
		if isAdd && isArchiveName(src) {
			return fmt.Errorf("ADD %s: Docker would unpack this archive, cellvm does not; unpack it into the context and COPY the directory", clip(src))
		}
		if strings.ContainsAny(src, "*?[") {
			return fmt.Errorf("%s %s: wildcards are not supported; name the files or their directory", what, clip(src))
		}
		local, err := p.contextPath(src)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, clip(src), err)
		}
		dst := fmt.Sprintf("copy/%d", len(p.d.Files))
		to := destAbs
		if dirDest && !isDirName(src) {
			// A file into a directory keeps its name; a directory's
			// contents go to DEST (ResolveDirs tells which it is).
			to = path.Join(destAbs, path.Base(filepath.ToSlash(local)))
			p.d.intoDir = append(p.d.intoDir, copyRef{file: len(p.d.Files), step: len(p.d.Recipe.Steps), dir: destAbs})
		}
		p.d.Files = append(p.d.Files, ArchiveFile{Src: local, Dst: dst})
		if err := p.add(sandbox.RecipeStep{CopyFrom: dst, CopyTo: to}); err != nil {
			return err
		}
	}
	if isAdd {
		p.d.Notices = append(p.d.Notices, "ADD of local files is read as COPY")
	}
	return nil
}

// isDirName reports whether a COPY source names a directory by its
// spelling ("." or a trailing slash); others are looked at when packed.
func isDirName(src string) bool {
	c := path.Clean(filepath.ToSlash(src))
	return c == "." || strings.HasSuffix(src, "/")
}

func isArchiveName(s string) bool {
	for _, ext := range []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst"} {
		if strings.HasSuffix(strings.ToLower(s), ext) {
			return true
		}
	}
	return false
}

// contextPath is a COPY source as a path in the context directory; it
// must not leave it (lexically: links are checked when packed).
func (p *parser) contextPath(src string) (string, error) {
	if src == "" || strings.IndexByte(src, 0) >= 0 {
		return "", errors.New("an empty source")
	}
	rel := path.Clean("/" + filepath.ToSlash(src))
	for _, e := range strings.Split(filepath.ToSlash(src), "/") {
		if e == ".." {
			return "", errors.New("the source leaves the build context (\"..\")")
		}
	}
	return filepath.Join(p.contextDir, filepath.FromSlash(strings.TrimPrefix(rel, "/"))), nil
}

func (p *parser) setEnv(args string) error {
	words, err := splitWords(args)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		return errors.New("ENV without a variable")
	}
	var env []string
	if !strings.Contains(words[0], "=") {
		// ENV KEY VALUE...: the rest of the line is the value.
		key := words[0]
		rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(args), key))
		vw, err := splitWords(rest)
		if err != nil {
			return err
		}
		val, err := p.expand(strings.Join(vw, " "))
		if err != nil {
			return err
		}
		env = append(env, key+"="+val)
		p.env[key] = val
	} else {
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok || k == "" {
				return fmt.Errorf("ENV %q: want KEY=VALUE ...", clip(w))
			}
			val, err := p.expand(v)
			if err != nil {
				return err
			}
			env = append(env, k+"="+val)
			p.env[k] = val
		}
	}
	return p.add(sandbox.RecipeStep{Env: env})
}

func (p *parser) setWorkdir(args string) error {
	words, err := splitWords(args)
	if err != nil {
		return err
	}
	if len(words) != 1 {
		return errors.New("want WORKDIR PATH")
	}
	dir, err := p.expand(words[0])
	if err != nil {
		return err
	}
	if !path.IsAbs(dir) {
		dir = path.Join(p.workdir, dir)
	}
	dir = path.Clean(dir)
	p.workdir = dir
	// Docker makes the directory; so does the recipe.
	if err := p.add(sandbox.RecipeStep{Run: "mkdir -p -- " + shellQuote(dir)}); err != nil {
		return err
	}
	return p.add(sandbox.RecipeStep{WorkingDir: dir})
}

func (p *parser) setUser(args string) error {
	words, err := splitWords(args)
	if err != nil {
		return err
	}
	if len(words) != 1 {
		return errors.New("want USER NAME[:GROUP]")
	}
	u, err := p.expand(words[0])
	if err != nil {
		return err
	}
	return p.add(sandbox.RecipeStep{User: u})
}

// expand replaces $VAR and ${VAR} with the values the file's ENV set. A
// variable it did not set is an error: the base image's environment is
// not known here, and a value left as "$PATH" would be wrong.
func (p *parser) expand(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if c != '$' {
			b.WriteByte(c)
			continue
		}
		name, n := varName(s[i+1:])
		if n == 0 {
			b.WriteByte(c)
			continue
		}
		v, ok := p.env[name]
		if !ok {
			return "", fmt.Errorf("$%s is not set by this Dockerfile's ENV; cellvm does not know the base image's environment when it reads the file, so write the value out in full", clip(name))
		}
		b.WriteString(v)
		i += n
	}
	return b.String(), nil
}

// varName reads a variable reference after '$': NAME or {NAME}; n is
// the bytes it took, 0 when none.
func varName(s string) (string, int) {
	if strings.HasPrefix(s, "{") {
		end := strings.IndexByte(s, '}')
		if end < 2 {
			return "", 0
		}
		name := s[1:end]
		if !validVar(name) {
			return "", 0
		}
		return name, end + 1
	}
	n := 0
	for n < len(s) && (s[n] == '_' || s[n] >= 'A' && s[n] <= 'Z' || s[n] >= 'a' && s[n] <= 'z' || n > 0 && s[n] >= '0' && s[n] <= '9') {
		n++
	}
	return s[:n], n
}

func validVar(name string) bool {
	_, n := varName(name)
	return n == len(name) && n > 0
}

// splitWords splits a line into words as the Dockerfile's shell form
// does: blanks separate, "..." and '...' quote, a backslash escapes.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == '"' || c == '\'':
			end := i + 1
			for ; end < len(s) && s[end] != c; end++ {
				if c == '"' && s[end] == '\\' && end+1 < len(s) {
					cur.WriteByte(s[end+1])
					end++
					continue
				}
				cur.WriteByte(s[end])
			}
			if end >= len(s) {
				return nil, fmt.Errorf("an unterminated %s quote", strconv.Quote(string(c)))
			}
			i = end
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
