// Command hostguard records the network state of the namespace it runs in
// (links, addresses, routes, rules, named namespaces, iptables and
// ip6tables rules, the IPv4/IPv6 sysctls) and later says what changed.
// `make test` saves it before the host's tests and checks it after them:
// no test may change the host's own network namespace (tests build theirs
// with test/netnstest), and one that does fails the run with what it left.
//
//	hostguard save FILE     record the state in FILE
//	hostguard check FILE    compare with FILE; exit 1 and list every difference
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// State is each section's lines, sorted.
type State map[string][]string

// source is one section of State and how to read it.
type source struct {
	name string
	argv []string                 // a command whose output is the section
	norm func(string) string      // normalizes one line ("" drops it)
	read func() ([]string, error) // instead of argv
}

var (
	counters  = regexp.MustCompile(`\[\d+:\d+\]`)
	expiresRe = regexp.MustCompile(`\s+expires \S+`)
	linkRe    = regexp.MustCompile(`^\d+: ([^:@]+)(@\S+)?: <([^>]*)>`)
)

func keep(s string) string { return strings.TrimSpace(s) }

func sources() []source {
	return []source{
		{name: "links", argv: []string{"ip", "-o", "link", "show"}, norm: func(l string) string {
			m := linkRe.FindStringSubmatch(l)
			if m == nil {
				return ""
			}
			up := "down"
			for _, f := range strings.Split(m[3], ",") {
				if f == "UP" {
					up = "up"
				}
			}
			return m[1] + " " + up
		}},
		{name: "addresses", argv: []string{"ip", "-o", "addr", "show"}, norm: func(l string) string {
			f := strings.Fields(l)
			if len(f) < 4 {
				return ""
			}
			return f[1] + " " + f[2] + " " + f[3]
		}},
		{name: "routes", argv: []string{"ip", "route", "show", "table", "all"}, norm: keep},
		{name: "routes6", argv: []string{"ip", "-6", "route", "show", "table", "all"}, norm: func(l string) string {
			return keep(expiresRe.ReplaceAllString(l, ""))
		}},
		{name: "rules", argv: []string{"ip", "rule", "show"}, norm: keep},
		{name: "netns", argv: []string{"ip", "netns", "list"}, norm: func(l string) string {
			if f := strings.Fields(l); len(f) > 0 {
				return f[0]
			}
			return ""
		}},
		{name: "iptables", read: func() ([]string, error) { return readIptables("iptables-save") }},
		{name: "ip6tables", read: func() ([]string, error) { return readIptables("ip6tables-save") }},
		{name: "sysctls", read: readSysctls},
	}
}

// builtinChains are the chains every table has; with policy ACCEPT and no
// rules they are what a never-touched table looks like.
var builtinChains = map[string]bool{"INPUT": true, "OUTPUT": true, "FORWARD": true, "PREROUTING": true, "POSTROUTING": true}

// readIptables lists each rule and each chain that is not a built-in one
// at policy ACCEPT, as "TABLE: LINE", without counters: a table a test only
// listed (which makes iptables-save print it, empty) is no change.
func readIptables(cmd string) ([]string, error) {
	out, err := exec.Command(cmd).Output()
	if err != nil {
		return []string{"(unreadable: " + cmd + ")"}, nil
	}
	var lines []string
	table := ""
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(counters.ReplaceAllString(l, "[]"))
		switch {
		case l == "" || strings.HasPrefix(l, "#") || l == "COMMIT":
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":"):
			f := strings.Fields(l[1:])
			if len(f) >= 2 && builtinChains[f[0]] && f[1] == "ACCEPT" {
				continue
			}
			lines = append(lines, table+": "+l)
		default:
			lines = append(lines, table+": "+l)
		}
	}
	return lines, nil
}

// sysctlGlobs are the knobs a network test could turn.
var sysctlGlobs = []string{
	"/proc/sys/net/ipv4/ip_forward",
	"/proc/sys/net/ipv4/conf/all/*",
	"/proc/sys/net/ipv4/conf/default/*",
	"/proc/sys/net/ipv6/conf/all/*",
	"/proc/sys/net/ipv6/conf/default/*",
	"/proc/sys/net/bridge/*",
}

func readSysctls() ([]string, error) {
	var out []string
	for _, g := range sysctlGlobs {
		paths, _ := filepath.Glob(g)
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				continue // write-only or gone: not state a test sets
			}
			v := strings.Join(strings.Fields(string(b)), " ")
			out = append(out, strings.TrimPrefix(p, "/proc/sys/")+" = "+v)
		}
	}
	return out, nil
}

// Snapshot reads the state of the current network namespace. A section
// whose command is missing is recorded as such, so its later appearance is
// not taken for a change of the host.
func Snapshot() (State, error) {
	st := State{}
	for _, s := range sources() {
		var lines []string
		if s.read != nil {
			l, err := s.read()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			lines = l
		} else {
			out, err := exec.Command(s.argv[0], s.argv[1:]...).Output()
			if err != nil {
				lines = []string{"(unreadable: " + strings.Join(s.argv, " ") + ")"}
			} else {
				sc := bufio.NewScanner(strings.NewReader(string(out)))
				sc.Buffer(make([]byte, 1<<16), 1<<20)
				for sc.Scan() {
					if n := s.norm(sc.Text()); n != "" {
						lines = append(lines, n)
					}
				}
			}
		}
		sort.Strings(lines)
		st[s.name] = lines
	}
	return st, nil
}

// Diff lists what differs from before to after, one line each, in a stable
// order: "SECTION: added: LINE" or "SECTION: removed: LINE".
func Diff(before, after State) []string {
	var names []string
	seen := map[string]bool{}
	for n := range before {
		names = append(names, n)
		seen[n] = true
	}
	for n := range after {
		if !seen[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		b, a := count(before[n]), count(after[n])
		for _, l := range before[n] {
			if a[l] < b[l] {
				out = append(out, n+": removed: "+l)
				b[l]--
			}
		}
		b = count(before[n])
		for _, l := range after[n] {
			if b[l] < a[l] {
				out = append(out, n+": added: "+l)
				a[l]--
			}
		}
	}
	return out
}

func count(lines []string) map[string]int {
	m := map[string]int{}
	for _, l := range lines {
		m[l]++
	}
	return m
}

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "save" && os.Args[1] != "check") {
		fmt.Fprintln(os.Stderr, "usage: hostguard save|check FILE")
		os.Exit(2)
	}
	now, err := Snapshot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostguard:", err)
		os.Exit(1)
	}
	file := os.Args[2]
	if os.Args[1] == "save" {
		b, _ := json.MarshalIndent(now, "", " ")
		if err := os.WriteFile(file, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "hostguard:", err)
			os.Exit(1)
		}
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostguard: no saved state (run 'hostguard save' before the tests):", err)
		os.Exit(1)
	}
	var before State
	if err := json.Unmarshal(b, &before); err != nil {
		fmt.Fprintf(os.Stderr, "hostguard: %s: %v\n", file, err)
		os.Exit(1)
	}
	if d := Diff(before, now); len(d) > 0 {
		fmt.Fprintf(os.Stderr, "hostguard: the tests changed this host's network namespace (%d difference(s)); a test must build its networks in a namespace of its own (test/netnstest):\n", len(d))
		for _, l := range d {
			fmt.Fprintln(os.Stderr, "  "+l)
		}
		os.Exit(1)
	}
	fmt.Println("hostguard: the host's links, addresses, routes, rules, namespaces, iptables and sysctls are as they were before the tests")
}
