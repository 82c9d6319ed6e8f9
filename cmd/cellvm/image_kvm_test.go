package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/test/netnstest"
)

// The image TestImageBuiltWithApt builds, in the rig, in a builder
// microVM, from a snapshot of Debian's mirror (rig-fixtures.sh) served by
// the test's mirror world.
const rigImage = "rig-jq"

// The test's Debian mirror: plain HTTP with its own DNS server, in a world
// namespace the test makes, like the package index's (makeIndexWorld). Its
// address is in the documentation range the daemon treats as public
// (--public-ranges); its DNS server is the daemon's upstream.
const (
	mirrorName  = "deb.cellvm.test"
	mirrorAddr  = "198.51.100.21"
	mirrorDNS   = "192.0.2.6:53"
	mirrorWorld = "cellvm-test-mirror"
)

// syncBuffer is a log written by servers' goroutines and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.b, format, args...)
}

// Reset forgets what was written so far.
func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// inNetns runs f on a thread in the named network namespace: sockets f
// opens stay in it. The thread goes back to the test's namespace after,
// or, if it cannot, ends with its goroutine (never reused elsewhere).
func inNetns(t *testing.T, ns string, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- err
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("back to the test's namespace: %w", err)
			return // the thread stays locked and ends with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	if err := <-errc; err != nil {
		t.Fatalf("in network namespace %s: %v", ns, err)
	}
}

// ip runs ip(8) with args, failing t if it fails.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// makeWorldNetns makes the network namespace ns (deleted at the test's
// end), reached from the test's own through a veth pair: up here with
// upCIDR, down there with downCIDR. Each of addrs (the world's servers'
// addresses) goes on down and is routed from here via down's address.
func makeWorldNetns(t *testing.T, ns, up, down, upCIDR, downCIDR string, addrs ...string) {
	t.Helper()
	exec.Command("ip", "netns", "del", ns).Run()
	ip(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ip(t, "link", "add", up, "type", "veth", "peer", "name", down)
	ip(t, "link", "set", down, "netns", ns)
	ip(t, "addr", "add", upCIDR, "dev", up)
	ip(t, "link", "set", up, "up")
	ip(t, "-n", ns, "addr", "add", downCIDR, "dev", down)
	ip(t, "-n", ns, "link", "set", down, "up")
	ip(t, "-n", ns, "link", "set", "lo", "up")
	via, _, _ := strings.Cut(downCIDR, "/")
	for _, a := range addrs {
		addWorldAddr(t, ns, down, via, a)
	}
}

// addWorldAddr puts addr on the world's end of the veth, down, and routes
// it from the test's namespace via the world's address via.
func addWorldAddr(t *testing.T, ns, down, via, addr string) {
	t.Helper()
	ip(t, "-n", ns, "addr", "add", addr+"/32", "dev", down)
	ip(t, "route", "replace", addr+"/32", "via", via)
}

// serveLogged serves h on l, logging each request's method, host and path.
func serveLogged(l net.Listener, h http.Handler, log *syncBuffer, who string) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s: %s %s %s\n", who, r.Method, r.Host, r.URL.Path)
		h.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
}

// makeMirrorWorld builds the mirror's world namespace, reached from the
// test's own through a veth (192.0.2.5 <-> 192.0.2.6), with DNS on
// mirrorDNS answering mirrorName and HTTP on mirrorAddr:80 serving dir
// under /debian/. It returns the servers' log.
func makeMirrorWorld(t *testing.T, dir string) *syncBuffer {
	t.Helper()
	if !netnstest.InChild() {
		t.Fatal("makeMirrorWorld outside a namespace of the test's own would change the host's routes")
	}
	makeWorldNetns(t, mirrorWorld, "cvt-mup", "cvt-mdown", "192.0.2.5/30", "192.0.2.6/30", mirrorAddr)
	log := &syncBuffer{}
	var httpL, dnsTCP net.Listener
	var dnsUDP net.PacketConn
	inNetns(t, mirrorWorld, func() (err error) {
		if httpL, err = net.Listen("tcp", mirrorAddr+":80"); err != nil {
			return err
		}
		if dnsTCP, err = net.Listen("tcp", mirrorDNS); err != nil {
			return err
		}
		dnsUDP, err = net.ListenPacket("udp", mirrorDNS)
		return err
	})
	zone := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		if len(req.Question) == 1 && strings.EqualFold(req.Question[0].Name, mirrorName+".") {
			if req.Question[0].Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(mirrorAddr)})
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})
	udp := &dns.Server{PacketConn: dnsUDP, Handler: zone}
	tcp := &dns.Server{Listener: dnsTCP, Handler: zone}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	serveLogged(httpL, http.StripPrefix("/debian", http.FileServer(http.Dir(dir))), log, "mirror")
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown(); httpL.Close() })
	r, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + mirrorAddr + "/debian/dists/bookworm/InRelease")
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the test mirror is not reachable from the test: %v %v\n%s", r, err, log.String())
	}
	r.Body.Close()
	return log
}

// TestImageBuiltWithApt, through the CLI and the API of a jailed daemon:
// `cellvm image build rig-jq --apt jq --mirror URL` builds, in a builder
// microVM whose network reaches only the mirror (the test's snapshot of
// Debian's, signed, checked by apt with Debian's keys), an image whose
// sandbox has Debian's jq, installed by dpkg and working, and whose image
// marker names the build; a sandbox of the default image has no jq; GET
// /v1/images lists the image with its packages and key; an image that is
// not there is a 400 naming those that are; the image cannot be deleted
// while its sandbox runs.
func TestImageBuiltWithApt(t *testing.T) {
	kvmtest.Require(t)
	if !netnstest.Isolate(t) {
		return
	}
	dir := t.TempDir()
	mirrorLog := makeMirrorWorld(t, fixture(t, mirrorSnapshotDir))
	d := startDaemon(t, dir, "--network", "--public-ranges", "198.51.100.0/24", "--dns-upstream", mirrorDNS)
	defer func() { d.stop(t) }()
	c := api.NewClient(d.socket)
	ctx := context.Background()

	mirror := "http://" + mirrorName + "/debian"
	r := cellvmCLI(t, d.socket, buildTimeout, "image", "build", rigImage, "--apt", "jq", "--mirror", mirror)
	if r.code != 0 {
		t.Fatalf("cellvm image build %s --apt jq --mirror %s: exit %d\n%s\nmirror log:\n%s", rigImage, mirror, r.code, r.stderr, mirrorLog.String())
	}
	for _, want := range []string{"GET " + mirrorName + " /debian/dists/bookworm/InRelease", "GET " + mirrorName + " /debian/pool/main/j/jq/jq_"} {
		if !strings.Contains(mirrorLog.String(), want) {
			t.Errorf("the mirror's log has no %q: apt did not use it\n%s", want, mirrorLog.String())
		}
	}

	list, err := c.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var got sandbox.ImageInfo
	for _, im := range list {
		names = append(names, im.Name)
		if im.Name == rigImage {
			got = im
		}
	}
	if len(list) < 2 || list[0].Name != sandbox.DefaultImage || got.Key == "" || !slices.Contains(got.Apt, "jq") || got.Python == "" || got.SizeBytes <= 0 ||
		got.Source != sandbox.ImageSourceBuild {
		t.Fatalf("GET /v1/images: %+v; want the default first and %s, built, with a key, apt [jq] and its manifest's Python", list, rigImage)
	}
	_, err = c.Create(ctx, sandbox.Config{Image: "no-such-image"})
	wantAPIStatus(t, "an unknown image", err, 400)
	if err == nil || !strings.Contains(err.Error(), strings.Join(names, ", ")) {
		t.Errorf("the refusal of an unknown image does not name the images (%s): %v", strings.Join(names, ", "), err)
	}

	probe := `import shutil, subprocess
jq = shutil.which('jq')
out = subprocess.run([jq, '-c', '.a'], input='{"a": [1, 2]}', capture_output=True, text=True).stdout.strip() if jq else None
dpkg = subprocess.run(['dpkg-query', '-W', '-f', '${Status}', 'jq'], capture_output=True, text=True).stdout
marker = open('/etc/cellvm-image').read()
(jq, out, dpkg, marker)`
	start := time.Now()
	sb, err := c.Create(ctx, sandbox.Config{Image: rigImage})
	if err != nil {
		t.Fatalf("create a sandbox of %s: %v", rigImage, err)
	}
	t.Logf("sandbox of %s up in %.1f s", rigImage, time.Since(start).Seconds())
	start = time.Now()
	res := mustCell(t, c, sb.ID, "1 + 1", 5*time.Minute)
	t.Logf("its first cell (the interpreter's start) answered in %.1f s: %s", time.Since(start).Seconds(), text(res))
	res = mustCell(t, c, sb.ID, probe, 2*time.Minute)
	t.Logf("in %s: %s", rigImage, text(res))
	if res.Status != cell.StatusOK || !strings.HasPrefix(text(res), "('/usr/bin/jq', '[1,2]', 'install ok installed', 'key "+got.Key) ||
		!strings.Contains(text(res), "name "+rigImage) {
		t.Errorf("the built image's sandbox: %+v; want /usr/bin/jq that prints [1,2], installed by dpkg, and a marker naming key %s", res, got.Key)
	}
	wantAPIStatus(t, "delete of an image a sandbox uses", c.DeleteImage(ctx, rigImage), 409)

	def, err := c.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res = mustCell(t, c, def.ID, "import shutil, subprocess\n(shutil.which('jq'), subprocess.run(['dpkg-query', '-W', 'jq'], capture_output=True).returncode != 0)", 2*time.Minute)
	if res.Status != cell.StatusOK || text(res) != "(None, True)" {
		t.Errorf("the default image's sandbox: %+v; want no jq, and none known to dpkg", res)
	}
	if t.Failed() {
		return // the daemon's stop logs the sandboxes' consoles first
	}
	for _, id := range []string{sb.ID, def.ID} {
		if err := c.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
}
