package imagecfg

import "strings"

// Identity is whom cells and commands run as, as their environment tells
// it.
type Identity struct {
	// Name is USER and LOGNAME; "" leaves them as they are.
	Name string
	// Home is HOME; "" leaves it.
	Home string
	// ImageHomeWins keeps an image's own HOME over Home, as Docker does
	// for the image's own user. Not for cellvm's cell user, whose home the
	// image cannot know.
	ImageHomeWins bool
}

// Env returns the environment of cells and commands, merged key by key,
// each later layer replacing the earlier one's value:
//
//  1. defaults: the guest's own (PATH, LANG, LC_ALL, ...). If the image
//     sets LANG or any LC_ variable, the defaults' locale variables are
//     dropped, so that the image's locale is the one in force (a default
//     LC_ALL would override its LANG);
//  2. image: the image's Env;
//  3. id: HOME, USER and LOGNAME of whom the code runs as.
//
// The sandbox's own variables come after all of these (interp.SetEnv),
// and the interpreter's settings after those. The result keeps the order
// in which keys first appear; entries without '=' are dropped.
func Env(defaults, image []string, id Identity) []string {
	m := newEnvMap()
	imageLocale := false
	for _, kv := range image {
		if k, _, _ := strings.Cut(kv, "="); isLocale(k) {
			imageLocale = true
		}
	}
	for _, kv := range defaults {
		if k, _, _ := strings.Cut(kv, "="); imageLocale && isLocale(k) {
			continue
		}
		m.set(kv)
	}
	imageHome := false
	for _, kv := range image {
		if strings.HasPrefix(kv, "HOME=") {
			imageHome = true
		}
		m.set(kv)
	}
	if id.Home != "" && (!imageHome || !id.ImageHomeWins) {
		m.set("HOME=" + id.Home)
	}
	if id.Name != "" {
		m.set("USER=" + id.Name)
		m.set("LOGNAME=" + id.Name)
	}
	return m.list()
}

// Lookup returns the value of key in env (the last one, as exec does).
func Lookup(env []string, key string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if k, val, found := strings.Cut(kv, "="); found && k == key {
			v, ok = val, true
		}
	}
	return v, ok
}

func isLocale(k string) bool {
	return k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_")
}

type envMap struct {
	keys []string
	val  map[string]string
}

func newEnvMap() *envMap { return &envMap{val: map[string]string{}} }

func (m *envMap) set(kv string) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return
	}
	if _, seen := m.val[k]; !seen {
		m.keys = append(m.keys, k)
	}
	m.val[k] = v
}

func (m *envMap) list() []string {
	out := make([]string, 0, len(m.keys))
	for _, k := range m.keys {
		out = append(out, k+"="+m.val[k])
	}
	return out
}
