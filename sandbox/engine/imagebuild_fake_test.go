package engine

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/vmm/control"
)

// fakeBuilderVMM is the test binary's role as the VMM of a builder VM
// with no KVM (CELLVM_TEST_FAKE_VMM=builder): its agent runs the "build"
// as the guest's builder would, on the disks the spec passes open: it
// keeps a copy of the inputs disk (CELLVM_TEST_BUILD_DIR/inputs.tar),
// writes progress and the result there, and makes an ext4 on the out
// disk with mkfs.ext4. CELLVM_TEST_BUILD says how it goes: "" well,
// "fail" (the apt step fails), "hang", "uuid" (another UUID), "size"
// (a size the superblock does not have), "result" (a result that is not
// one), "languages" (a language cellvm does not know). The image it
// reports has python3 and bash, no node.
func fakeBuilderVMM(args []string) int {
	spec, files, ln, err := fakeVMMStart(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm:", err)
		return 1
	}
	fmt.Println("fake guest: booted")
	in, out := files[control.DiskSlot(1)], files[control.DiskSlot(2)]
	if in == nil || out == nil || len(spec.Disks) != 3 || !spec.Disks[1].ReadOnly || spec.Disks[2].ReadOnly {
		fmt.Fprintln(os.Stderr, "fake vmm: the builder's disks are not inputs (read-only) and out (writable):", spec.Disks)
		return 1
	}
	srv := agent.NewServer(agent.Config{Interp: &builderInterp{in: in, out: out}, Software: "fake-builder",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnShutdown: func() { os.Exit(0) }})
	return fakeVMMServe(ln, srv.ServeConn)
}

type builderInterp struct {
	diesInterp
	in, out *os.File
}

func (b *builderInterp) Exec(ctx context.Context, argv []string, _ io.Reader, _ time.Duration) (cell.ExecResult, error) {
	if len(argv) != 2 || argv[0] != "/proc/1/exe" || argv[1] != buildplan.BuildArg {
		return cell.ExecResult{ExitCode: 127, Stderr: fmt.Sprintf("not the builder: %q", argv)}, nil
	}
	dir, mode := os.Getenv("CELLVM_TEST_BUILD_DIR"), os.Getenv("CELLVM_TEST_BUILD")
	progress, err := os.OpenFile(filepath.Join(dir, "progress"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return cell.ExecResult{}, err
	}
	defer progress.Close()
	say := func(lines ...string) {
		for _, l := range lines {
			fmt.Fprintln(progress, l)
		}
	}
	plan, err := b.copyInputs(filepath.Join(dir, "inputs.tar"))
	if err != nil {
		say("failed: extract")
		return cell.ExecResult{ExitCode: 2, Stderr: err.Error()}, nil
	}
	say("step extract", "extracting "+plan.Mode)
	switch mode {
	case "fail":
		say("step apt", "Reading package lists...", "E: Unable to locate package nope", "failed: apt")
		return cell.ExecResult{ExitCode: 100}, nil
	case "hang":
		say("step run", "sleeping")
		<-ctx.Done()
		return cell.ExecResult{ExitCode: -1, TimedOut: true}, nil
	}
	say("step mkfs")
	uuid := plan.UUID
	if mode == "uuid" {
		uuid = "ffffffff-ffff-ffff-ffff-ffffffffffff"
	}
	dev := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), b.out.Fd())
	if o, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-U", uuid, "-b", "4096", dev, "2048").CombinedOutput(); err != nil {
		say("mkfs.ext4: "+string(o), "failed: mkfs")
		return cell.ExecResult{ExitCode: 1}, nil
	}
	size := int64(8 << 20)
	if mode == "size" {
		size = 12 << 20
	}
	cfg := plan.Config
	for _, s := range plan.Steps {
		cfg.Env = append(cfg.Env, s.Env...)
		if s.WorkingDir != "" {
			cfg.WorkingDir = s.WorkingDir
		}
	}
	man := json.RawMessage(`{"python": "3.11.2", "modules": [{"import": "hello", "distribution": "hello", "version": "2.10"}], "distributions": {"hello": "2.10"}}`)
	langs := []cell.LanguageInfo{{Name: cell.Python, Version: "3.11.2"}, {Name: cell.Bash, Version: "5.2.15"}}
	if mode == "languages" {
		langs = append(langs, cell.LanguageInfo{Name: "cobol", Version: "85"})
	}
	res, _ := json.Marshal(buildplan.Result{SizeBytes: size, UUID: plan.UUID, Config: cfg, Python: "3.11.2", Languages: langs, Manifest: man})
	if mode == "result" {
		res = []byte(`{"size_bytes": 8388608, "uuid": "` + plan.UUID + `", "owned": true}`)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), res, 0o644); err != nil {
		return cell.ExecResult{}, err
	}
	return cell.ExecResult{ExitCode: 0, Stdout: "built " + strconv.FormatInt(size, 10)}, nil
}

// copyInputs copies the inputs disk to path and reads its plan (the first
// entry).
func (b *builderInterp) copyInputs(path string) (*buildplan.Plan, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := io.Copy(f, io.NewSectionReader(b.in, 0, 1<<40)); err != nil {
		return nil, err
	}
	tr := tar.NewReader(io.NewSectionReader(b.in, 0, 1<<40))
	h, err := tr.Next()
	if err != nil || h.Name != buildplan.PlanFile {
		return nil, errors.New("the inputs disk does not start with the plan")
	}
	var p buildplan.Plan
	if err := json.NewDecoder(tr).Decode(&p); err != nil {
		return nil, err
	}
	return &p, p.Validate()
}
