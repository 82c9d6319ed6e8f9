package main

import (
	"io"
	"os"
	"regexp"
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
							Args []string `yaml:"args"`
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
