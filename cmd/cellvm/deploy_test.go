package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeployManifestsUseRealFlags: the deployment files in deploy/ start
// `cellvm serve` with flags that serve has (a renamed flag would break a
// deployment nobody runs here). The manifests themselves are not run here.
func TestDeployManifestsUseRealFlags(t *testing.T) {
	root := (&app{stdout: io.Discard, stderr: io.Discard, deps: productionDeps()}).rootCommand()
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(file string, args []string) {
		t.Helper()
		if len(args) == 0 {
			t.Errorf("%s: no serve arguments found", file)
		}
		for _, a := range args {
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if serve.Flags().Lookup(name) == nil {
				t.Errorf("%s: serve has no flag --%s", file, name)
			}
		}
	}

	// Kubernetes: the DaemonSet's container args.
	f, err := os.Open("../../deploy/kubernetes/cellvm-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	found := false
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Command []string `yaml:"command"`
							Args    []string `yaml:"args"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("daemonset yaml: %v", err)
		}
		if doc.Kind == "DaemonSet" {
			found = true
			c := doc.Spec.Template.Spec.Containers
			if len(c) != 1 || len(c[0].Args) == 0 || c[0].Args[0] != "serve" {
				t.Fatalf("DaemonSet container args: %+v", c)
			}
			check("cellvm-daemonset.yaml", c[0].Args[1:])
			// The command's shell adds --tls-cert and --tls-key.
			script := strings.Join(c[0].Command, " ")
			check("cellvm-daemonset.yaml (command)", regexp.MustCompile(`--[a-z][a-z-]*`).FindAllString(script, -1))
		}
	}
	if !found {
		t.Error("no DaemonSet in cellvm-daemonset.yaml")
	}
	for _, p := range []string{"../../deploy/kubernetes/cellvm-router.yaml"} {
		b, _ := os.ReadFile(p)
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		for {
			var v any
			if err := dec.Decode(&v); err == io.EOF {
				break
			} else if err != nil {
				t.Errorf("%s: %v", p, err)
				break
			}
		}
	}

	// systemd: the ExecStart line and its continuations.
	b, err := os.ReadFile("../../deploy/systemd/cellvm.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)ExecStart=\S+ serve((?:[^\n]*\\\n)*[^\n]*)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no ExecStart=... serve in cellvm.service")
	}
	check("cellvm.service", strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " ")))

	// Nomad: the task's args list.
	b, err = os.ReadFile("../../deploy/nomad/cellvm.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	m = regexp.MustCompile(`(?s)args = \[\s*"serve",(.*?)\]`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no args = [\"serve\", ...] in cellvm.nomad.hcl")
	}
	var nomadArgs []string
	for _, q := range regexp.MustCompile(`"([^"]*)"`).FindAllSubmatch(m[1], -1) {
		nomadArgs = append(nomadArgs, string(q[1]))
	}
	check("cellvm.nomad.hcl", nomadArgs)
}

// TestDaemonSetLivenessProbeAsksTheDaemon runs the DaemonSet's liveness
// probe command (the test binary standing in for cellvm) against a daemon
// at the probe's socket: it succeeds, the daemon answered only reads (no
// sandbox made, no guest booted), and it fails when no daemon answers.
func TestDaemonSetLivenessProbeAsksTheDaemon(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/cellvm-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var probe []string
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	for {
		var doc struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							LivenessProbe struct {
								Exec struct {
									Command []string `yaml:"command"`
								} `yaml:"exec"`
							} `yaml:"livenessProbe"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if c := doc.Spec.Template.Spec.Containers; doc.Kind == "DaemonSet" && len(c) > 0 {
			probe = c[0].LivenessProbe.Exec.Command
		}
	}
	if len(probe) < 2 || probe[0] != "/usr/local/bin/cellvm" {
		t.Fatalf("the DaemonSet's liveness probe is not a cellvm command: %q", probe)
	}
	args := slices.Clone(probe[1:])
	i := slices.Index(args, "--socket")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("the liveness probe %q names no --socket", probe)
	}
	d := startFakeDaemon(t)
	args[i+1] = d.socket
	before := len(strings.Split(d.log.String(), "\n"))
	if r := cellvmEnv(t, nil, "", args...); r.code != 0 {
		t.Fatalf("the liveness probe %q against a live daemon: %+v", args, r)
	}
	// The daemon logs a request just after answering it; `cellvm stats`
	// asks for the capacity and the list.
	var reqs []string
	waitFor(t, "the probe's two requests in the daemon's log", func() bool {
		reqs = nil
		for _, l := range strings.Split(d.log.String(), "\n")[before-1:] {
			if strings.Contains(l, `msg="api request"`) {
				reqs = append(reqs, l)
			}
		}
		return len(reqs) >= 2
	})
	for _, l := range reqs {
		if !strings.Contains(l, "method=GET") || strings.Contains(l, "sandbox=") {
			t.Errorf("the liveness probe made the daemon do more than read: %s", l)
		}
	}
	args[i+1] = filepath.Join(t.TempDir(), "no-daemon.sock")
	if r := cellvmEnv(t, nil, "", args...); r.code == 0 {
		t.Errorf("the liveness probe succeeds with no daemon: %+v", r)
	}
}
