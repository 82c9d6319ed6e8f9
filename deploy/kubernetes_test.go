package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// decodeManifests decodes every object of the YAML files in
// kubernetes/ into its k8s.io/api type, strictly: an unknown or duplicate
// field is an error, as `kubectl apply --validate=strict` makes it.
func decodeManifests(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kubernetes/*.yaml (%v)", err)
	}
	objects := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var tm struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "apps/v1 DaemonSet":
				obj = &appsv1.DaemonSet{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			default:
				t.Fatalf("%s, document %d: %s %s: add its type to this test", f, i+1, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s, document %d (%s): %v", f, i+1, tm.Kind, err)
			}
			// encoding/json matches field names in any case (hostPid
			// would pass as hostPID); the API server does not. Every key
			// of the file must come back, spelled the same, when the
			// object is encoded again.
			var in, out any
			if err := yaml.Unmarshal([]byte(doc), &in); err != nil {
				t.Fatal(err)
			}
			enc, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			json.Unmarshal(enc, &out)
			for _, p := range missingKeys(in, out, "") {
				t.Errorf("%s, document %d (%s): %s is not a field of %T (its case?)", f, i+1, tm.Kind, p, obj)
			}
			name := objectName(obj)
			key := tm.Kind + "/" + name
			if _, dup := objects[key]; dup {
				t.Errorf("%s: %s twice", f, key)
			}
			objects[key] = obj
		}
	}
	return objects
}

// missingKeys lists the map keys of in (at any depth) that out lacks, but
// for zero values, which an object's encoding leaves out.
func missingKeys(in, out any, path string) []string {
	var missing []string
	switch iv := in.(type) {
	case map[string]any:
		ov, _ := out.(map[string]any)
		for k, v := range iv {
			o, ok := ov[k]
			if !ok {
				if !isZero(v) {
					missing = append(missing, path+"."+k)
				}
				continue
			}
			missing = append(missing, missingKeys(v, o, path+"."+k)...)
		}
	case []any:
		ov, _ := out.([]any)
		for i, v := range iv {
			if i < len(ov) {
				missing = append(missing, missingKeys(v, ov[i], fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return missing
}

func isZero(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

func objectName(obj any) string {
	return obj.(interface{ GetName() string }).GetName()
}

// TestKubernetesManifestsDecodeStrictly: every object decodes with no
// unknown field, and each pod's mounts name its volumes.
func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	objs := decodeManifests(t)
	for _, want := range []string{"Namespace/cellvm", "DaemonSet/cellvm", "Deployment/cellvm-router", "Service/cellvm"} {
		if objs[want] == nil {
			t.Errorf("no %s in kubernetes/*.yaml", want)
		}
	}
	for key, obj := range objs {
		var spec *corev1.PodSpec
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			spec = &o.Spec.Template.Spec
			if o.Spec.Selector == nil {
				t.Errorf("%s: no selector", key)
			} else {
				checkSelector(t, key, o.Spec.Selector.MatchLabels, o.Spec.Template.Labels)
			}
		case *appsv1.Deployment:
			spec = &o.Spec.Template.Spec
			if o.Spec.Selector == nil {
				t.Errorf("%s: no selector", key)
			} else {
				checkSelector(t, key, o.Spec.Selector.MatchLabels, o.Spec.Template.Labels)
			}
		default:
			continue
		}
		vols := map[string]bool{}
		for _, v := range spec.Volumes {
			vols[v.Name] = true
		}
		for _, c := range spec.Containers {
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s: container %s mounts volume %q, which the pod does not have", key, c.Name, m.Name)
				}
			}
		}
	}
}

func checkSelector(t *testing.T, key string, match, labels map[string]string) {
	t.Helper()
	if len(match) == 0 {
		t.Errorf("%s: no selector", key)
		return
	}
	for k, v := range match {
		if labels[k] != v {
			t.Errorf("%s: the selector's %s=%s is not on the pod template", key, k, v)
		}
	}
}

func daemonSet(t *testing.T) (*corev1.PodSpec, *corev1.Container) {
	t.Helper()
	ds, _ := decodeManifests(t)["DaemonSet/cellvm"].(*appsv1.DaemonSet)
	if ds == nil {
		t.Fatal("no DaemonSet/cellvm")
	}
	spec := &ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("DaemonSet: %d containers, want 1", len(spec.Containers))
	}
	return spec, &spec.Containers[0]
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func mountPath(c *corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

// TestDaemonSetKeepsVMsAndNeedsNoTLSSecret: the host's PID namespace (so
// the VMMs outlive the container), the TLS Secret optional and the tokens
// required, and a liveness probe that asks the daemon rather than booting
// a guest.
func TestDaemonSetKeepsVMsAndNeedsNoTLSSecret(t *testing.T) {
	spec, c := daemonSet(t)
	if !spec.HostPID {
		t.Error("DaemonSet: hostPID is not true: the VMMs die with the container's PID namespace")
	}
	if !spec.HostNetwork {
		t.Error("DaemonSet: hostNetwork is not true: the router reaches each daemon at its node's address")
	}
	tls := volume(spec, "tls")
	if tls == nil || tls.Secret == nil || tls.Secret.Optional == nil || !*tls.Secret.Optional {
		t.Errorf("DaemonSet: the tls volume is not an optional Secret: %+v", tls)
	}
	tokens := volume(spec, "tokens")
	if tokens == nil || tokens.Secret == nil || tokens.Secret.Optional != nil && *tokens.Secret.Optional {
		t.Errorf("DaemonSet: the tokens volume must be a required Secret (serve --listen needs tokens): %+v", tokens)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--tls-cert") || strings.HasPrefix(a, "--tls-key") {
			t.Errorf("DaemonSet: %s in args: the daemon would fail to start without the optional Secret", a)
		}
	}
	if !slices.Contains(c.Args, "--state-dir=/var/lib/cellvm") || mountPath(c, "state") != "/var/lib/cellvm" ||
		volume(spec, "state") == nil || volume(spec, "state").HostPath == nil {
		t.Error("DaemonSet: the state directory is not /var/lib/cellvm on the host: a restarted daemon could not take its VMs back")
	}

	// The liveness probe asks the daemon on its socket.
	p := c.LivenessProbe
	if p == nil || p.Exec == nil || len(p.Exec.Command) < 2 {
		t.Fatalf("DaemonSet: the liveness probe is not a command: %+v", p)
	}
	cmd := p.Exec.Command
	if cmd[0] != "/usr/local/bin/cellvm" || cmd[1] != "stats" {
		t.Errorf("DaemonSet: the liveness probe runs %q; want `cellvm stats` (doctor --kvm boots a guest each time)", cmd)
	}
	socket := ""
	for _, a := range c.Args {
		if s, ok := strings.CutPrefix(a, "--socket="); ok {
			socket = s
		}
	}
	if i := slices.Index(cmd, "--socket"); socket == "" || i < 0 || i+1 >= len(cmd) || cmd[i+1] != socket {
		t.Errorf("DaemonSet: the probe %q does not ask the daemon's socket %q", cmd, socket)
	}
	if p.PeriodSeconds < 10 || p.TimeoutSeconds < 5 || p.FailureThreshold < 2 {
		t.Errorf("DaemonSet: the liveness probe (every %ds, %ds timeout, %d failures) would restart a busy daemon", p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold)
	}
}

// TestDaemonSetTLSWrapper runs the container's command (a shell that adds
// --tls-cert and --tls-key only when the Secret's files are there) with
// the paths moved into a test directory and cellvm replaced by a script
// that prints its arguments.
func TestDaemonSetTLSWrapper(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this host")
	}
	spec, c := daemonSet(t)
	if len(c.Command) != 4 || c.Command[0] != "/bin/sh" || c.Command[1] != "-c" {
		t.Fatalf("DaemonSet: command %q, want /bin/sh -c SCRIPT NAME", c.Command)
	}
	dir := t.TempDir()
	tlsDir := mountPath(c, "tls")
	if tlsDir == "" || volume(spec, "tls") == nil {
		t.Fatal("DaemonSet: no tls mount")
	}
	fake := filepath.Join(dir, "cellvm")
	os.WriteFile(fake, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\"\n"), 0o755)
	script := c.Command[2]
	for _, s := range [][2]string{{tlsDir + "/", dir + "/tls/"}, {"/usr/local/bin/cellvm", fake}} {
		if !strings.Contains(script, s[0]) {
			t.Fatalf("DaemonSet: the command's script has no %s: %q", s[0], script)
		}
		script = strings.ReplaceAll(script, s[0], s[1])
	}
	run := func() []string {
		t.Helper()
		out, err := exec.Command(sh, append([]string{"-c", script, c.Command[3]}, c.Args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("the container's command: %v\n%s", err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	// Without the Secret's files: serve's args as they are.
	if got := run(); !slices.Equal(got, c.Args) {
		t.Errorf("without the TLS Secret: cellvm ran with %q, want %q", got, c.Args)
	}
	// With them: the certificate and key added.
	os.MkdirAll(filepath.Join(dir, "tls"), 0o700)
	os.WriteFile(filepath.Join(dir, "tls", "tls.crt"), []byte("cert"), 0o600)
	os.WriteFile(filepath.Join(dir, "tls", "tls.key"), []byte("key"), 0o600)
	want := append(slices.Clone(c.Args), "--tls-cert="+dir+"/tls/tls.crt", "--tls-key="+dir+"/tls/tls.key")
	if got := run(); !slices.Equal(got, want) {
		t.Errorf("with the TLS Secret: cellvm ran with %q, want %q", got, want)
	}
}

// TestRouterDeploymentServesTheConfig: the router's pod mounts the
// ConfigMap's nginx.conf where nginx reads it, and its certificate where
// nginx.conf says (a required Secret: nginx cannot start without it).
func TestRouterDeploymentServesTheConfig(t *testing.T) {
	d, _ := decodeManifests(t)["Deployment/cellvm-router"].(*appsv1.Deployment)
	if d == nil {
		t.Fatal("no Deployment/cellvm-router")
	}
	spec := &d.Spec.Template.Spec
	c := &spec.Containers[0]
	conf := volume(spec, "conf")
	if conf == nil || conf.ConfigMap == nil {
		t.Fatal("router: no conf ConfigMap volume")
	}
	var m *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == "conf" {
			m = &c.VolumeMounts[i]
		}
	}
	if m == nil || m.MountPath != "/etc/nginx/nginx.conf" || m.SubPath != "nginx.conf" {
		t.Errorf("router: nginx.conf mounted as %+v", m)
	}
	nginxConf, err := os.ReadFile("router/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir := mountPath(c, "tls")
	for _, f := range []string{"tls.crt", "tls.key"} {
		if dir == "" || !strings.Contains(string(nginxConf), dir+"/"+f) {
			t.Errorf("router: nginx.conf does not read %s from the mounted Secret (%q)", f, dir)
		}
	}
	if tls := volume(spec, "tls"); tls == nil || tls.Secret == nil || tls.Secret.Optional != nil && *tls.Secret.Optional {
		t.Errorf("router: the tls volume must be a required Secret: %+v", tls)
	}
	for _, p := range c.Ports {
		if !strings.Contains(string(nginxConf), "listen "+strconv.Itoa(int(p.ContainerPort))+" ssl") {
			t.Errorf("router: port %d is not where nginx.conf listens", p.ContainerPort)
		}
	}
}
