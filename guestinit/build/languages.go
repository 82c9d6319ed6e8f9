package build

import (
	"strings"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/image/manifest"
)

// The languages an image can run cells in, found as the guest's sessions
// find their programs: python3, node and bash on the image's PATH (its
// config's, as its cells get it), each run once to say its version. A
// program that is missing, does not run or says no version leaves its
// language out, so a pulled image without node has no JavaScript and
// the engine refuses JavaScript cells for it, naming what it has.
// TypeScript is the default image's transpiler (image/typescript.sh) run
// by the image's node: an image built on the default one keeps it.

// TypeScriptInImage is where the default image carries TypeScript's
// transpiler (the Node runtime's default CELLVM_TYPESCRIPT).
const TypeScriptInImage = "/opt/cellvm/node_modules/typescript/lib/typescript.js"

// typescriptCheck loads the transpiler given as its argument, strips a
// type with it and prints its version.
const typescriptCheck = `const ts = require(process.argv[1]);` +
	`if (ts.transpileModule('let x: number = 1', {}).outputText.includes(':')) process.exit(1);` +
	`console.log(ts.version)`

// findLanguages lists the image's languages (b.python found already).
func (b *builder) findLanguages() []cell.LanguageInfo {
	var out []cell.LanguageInfo
	add := func(l cell.Language, v string) {
		if v != "" {
			out = append(out, cell.LanguageInfo{Name: l, Version: v})
			b.p.Printf("language %s %s", l, v)
		}
	}
	add(cell.Python, b.checkedVersion(cell.Python, b.python))
	if v := b.programVersion(cell.JavaScript, []string{"node", "--version"}, "v"); v != "" {
		add(cell.JavaScript, v)
		if _, ok := b.regularFile(TypeScriptInImage); ok {
			add(cell.TypeScript, b.programVersion(cell.TypeScript, []string{"node", "-e", typescriptCheck, TypeScriptInImage}, ""))
		}
	}
	add(cell.Bash, b.programVersion(cell.Bash, []string{"bash", "--norc", "--noprofile", "-c",
		`echo "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}.${BASH_VERSINFO[2]}"`}, ""))
	return out
}

// programVersion runs argv in the image and returns the first line it
// printed, less prefix, if that is a version; "" (saying why) otherwise.
func (b *builder) programVersion(l cell.Language, argv []string, prefix string) string {
	env := b.stepEnv(nil)
	if b.lookPath(argv[0], env) == "" {
		b.p.Printf("the image has no %s on its PATH (%s): no %s cells", argv[0], clip(envValue(env, "PATH")), l)
		return ""
	}
	out := &limitBuffer{max: 4096}
	if err := b.inRoot(rootCmd{argv: argv, env: []string{"NO_COLOR=1"}, out: out}); err != nil {
		b.p.Printf("the image's %s does not run (%v; %s): no %s cells", argv[0], err, clip(strings.TrimSpace(out.String())), l)
		return ""
	}
	v, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	return b.checkedVersion(l, strings.TrimPrefix(strings.TrimSpace(v), prefix))
}

// checkedVersion is v if it reads as a version of l (the host checks it
// again: manifest.CheckLanguages).
func (b *builder) checkedVersion(l cell.Language, v string) string {
	if v == "" {
		return ""
	}
	if err := manifest.CheckLanguages([]cell.LanguageInfo{{Name: l, Version: v}}); err != nil {
		b.p.Printf("%v: no %s cells", err, l)
		return ""
	}
	return v
}
