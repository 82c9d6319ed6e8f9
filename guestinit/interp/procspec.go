package interp

// What the agent's background processes (guestinit/agent, procs.go) share
// with commands: the environment and the cells' cgroup, so a process the
// host starts runs where Exec's commands run and counts against the same
// memory and task budget.

// CommandEnv is the environment commands start with: the configured one
// and SetEnv's variables. The result is a fresh slice.
func (in *Interp) CommandEnv() []string { return in.baseEnv() }

// CellsCgroup is the cgroup v2 directory of all user code, in which each
// background process gets a cgroup of its own; "" without cgroups.
func (in *Interp) CellsCgroup() string {
	if in.cells == nil {
		return ""
	}
	return in.cells.dir
}

// Dir is the working directory of cells and commands.
func (in *Interp) Dir() string { return in.cfg.Dir }
