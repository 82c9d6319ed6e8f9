package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// kernelStacks describes where the threads of process pid are in the
// kernel (/proc/PID/task/*/stack, which needs root): one entry per
// distinct stack, its frames' function names innermost first, with how
// many threads share it. Threads idle in a futex or poll wait are left
// out unless all is set. It is for a start that hangs: a VMM blocked in
// its clone, in KVM or in a namespace's teardown says where.
func kernelStacks(pid int, all bool) []string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return []string{err.Error()}
	}
	count := map[string]int{}
	var order []string
	idle, unread := 0, 0
	var idleOne, unreadWhy string
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/task", pid), t.Name(), "stack"))
		if err != nil {
			unread, unreadWhy = unread+1, err.Error()
			continue
		}
		s := stackFrames(string(b))
		if s == "" {
			s = "(running in user space)"
		}
		// A thread with a signal pending says so, with its mask: a
		// start held in the jail's privilege drop waits for one thread
		// to take the runtime's per-thread-syscall signal.
		pending := false
		if st, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/task", pid), t.Name(), "status")); err == nil {
			if pend := statusField(string(st), "SigPnd"); pend != "" && strings.Trim(pend, "0") != "" {
				pending = true
				s += fmt.Sprintf(" [tid %s %s SigPnd=%s SigBlk=%s]", t.Name(), statusField(string(st), "State"), pend, statusField(string(st), "SigBlk"))
			}
		}
		if !all && !pending && idleStack(s) {
			idle, idleOne = idle+1, s
			continue
		}
		if count[s] == 0 {
			order = append(order, s)
		}
		count[s]++
	}
	out := make([]string, 0, len(order)+2)
	for _, s := range order {
		out = append(out, fmt.Sprintf("%dx %s", count[s], s))
	}
	// What was left out is counted: an empty list would not tell "all
	// waiting in user space" from "nothing could be read".
	if idle > 0 {
		out = append(out, fmt.Sprintf("%dx idle (one: %s)", idle, idleOne))
	}
	if unread > 0 {
		out = append(out, fmt.Sprintf("%dx unreadable (%s)", unread, unreadWhy))
	}
	return out
}

// stackFrames is a /proc/PID/stack text's function names, innermost
// first, joined by " < ", at most 12 of them.
func stackFrames(text string) string {
	var fns []string
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		fn, _, _ := strings.Cut(f[1], "+")
		fns = append(fns, fn)
		if len(fns) == 12 {
			break
		}
	}
	return strings.Join(fns, " < ")
}

// statusField is the value of field name in a /proc/PID/status text.
func statusField(status, name string) string {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// idleStack reports whether a stack is a thread waiting for work (a
// futex, a poll, a sleep), not one stuck making a process.
func idleStack(s string) bool {
	if strings.Contains(s, "copy_process") {
		return false
	}
	for _, w := range []string{"futex_wait", "ep_poll", "do_sys_poll", "do_select", "do_nanosleep"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
