# cellvm's Bash driver: one persistent shell whose cells are sourced into
# it, so cd, variables, exports, functions and options persist. See
# PROTOCOL.md, "Bash". Started by the supervisor as
#
#     bash --norc --noprofile cellvm_driver.bash 3 4
#
# fd 3 carries commands ("exec N LEN\n" and LEN bytes of code, "reap\n",
# "reseed\n"), fd 4 events (JSON lines). Everything here is named
# __cellvm_* so it stays out of the cell's way.

if [ -z "${__cellvm_pid-}" ]; then
	# Plain syntax up to the check: an old bash must get this far.
	if [ "${BASH_VERSINFO[0]}" -lt 4 ] || { [ "${BASH_VERSINFO[0]}" -eq 4 ] && [ "${BASH_VERSINFO[1]}" -lt 4 ]; }; then
		printf '{"ev":"unsupported","version":"%s"}\n' "${BASH_VERSION%%[!0-9.]*}" >&4
		exit 1
	fi
	# The protocol's fds move above 9 (bash's own range), so a cell's
	# redirections of 3 and 4 are its own; they are closed for the cell.
	exec {__cellvm_cmd}<&3 {__cellvm_ev}>&4 3<&- 4>&-
	readonly __cellvm_cmd __cellvm_ev __cellvm_pid=$$
	BASH_ARGV0=bash # messages say "bash: ...", not the driver's path
	__cellvm_errexit= # the cell's set -e, off between cells
	builtin set -E    # errtrace: the ERR trap (set -e's guard) runs in functions

	# __cellvm_unwind makes the rest of the cell not run: a DEBUG trap,
	# inherited by functions (functrace), runs "return" before the next
	# command of each function and of the sourced cell, frame by frame,
	# wherever the cell is. Only the shell itself unwinds: a subshell
	# (BASHPID differs) runs on, and in the driver's own frame nothing is
	# skipped. No subshell in the trap: subshells inherit it too.
	__cellvm_unwind() {
		[[ $BASHPID == "$__cellvm_pid" ]] || builtin return 0
		[[ $__cellvm_traced ]] || __cellvm_traced=x$-
		builtin set -o functrace
		builtin trap 'if [[ $BASHPID == "$__cellvm_pid" ]] && ((${#BASH_SOURCE[@]} > __cellvm_depth)); then builtin return 2; fi' DEBUG
	}

	# SIGINT (the supervisor's interrupt or timeout, sent to the process
	# group, so a foreground child dies too) ends the cell, keeping the
	# shell.
	__cellvm_on_int() {
		__cellvm_int=1
		__cellvm_unwind
	}

	# set -e: a failing command ends the cell (status error), not the
	# shell. The ERR trap runs before errexit would exit; turning -e off
	# there keeps the shell, and the driver turns it on again for the
	# next cell.
	__cellvm_on_err() {
		builtin local st=$?
		[[ $- == *e* && $BASHPID == "$__cellvm_pid" ]] || builtin return 0
		builtin set +e
		__cellvm_eoff=1
		# In the driver's frame it is the cell's own status (a return,
		# or an unwound cell): only the shell is kept.
		if ((${#BASH_SOURCE[@]} > __cellvm_depth + 1)); then
			__cellvm_errhit=$st
			__cellvm_unwind
		fi
	}

	# exit in a cell ends the cell with that status, not the shell; in a
	# subshell, or as "builtin exit", it is bash's own.
	exit() {
		builtin local __cellvm_st=$?
		if [[ $BASHPID != "$__cellvm_pid" ]] || ((${#BASH_SOURCE[@]} <= __cellvm_depth + 1)); then
			builtin exit "$@"
		fi
		if (($# > 1)); then
			builtin printf 'bash: exit: too many arguments\n' >&2
			builtin return 1
		fi
		if (($#)); then
			if [[ $1 =~ ^[-+]?[0-9]{1,18}$ ]]; then
				__cellvm_st=$((10#${1#[-+]} & 255))
				[[ $1 == -* ]] && __cellvm_st=$(((256 - __cellvm_st) & 255))
			else
				builtin printf 'bash: exit: %s: numeric argument required\n' "$1" >&2
				__cellvm_st=2
			fi
		fi
		__cellvm_exit=$__cellvm_st
		__cellvm_unwind
		builtin return "$__cellvm_st"
	}

	# __cellvm_ended sends the cell's error and done frames for status
	# $1 and puts the shell back as the driver wants it between cells.
	__cellvm_ended() {
		builtin local st=$1 status=ok interrupted=false
		builtin trap '' INT
		if [[ $__cellvm_traced ]]; then
			[[ $__cellvm_traced == *T* ]] || builtin set +o functrace
			__cellvm_traced=
		fi
		__cellvm_errexit=
		[[ $- == *e* || $__cellvm_eoff ]] && __cellvm_errexit=1
		builtin set +e
		if [[ $__cellvm_int ]]; then
			status=error interrupted=true
			builtin printf '{"ev":"error","name":"KeyboardInterrupt","value":"interrupted","traceback":[]}\n' >&"$__cellvm_ev"
		elif [[ $__cellvm_exit ]]; then
			st=$__cellvm_exit
		elif [[ $__cellvm_errhit ]]; then
			st=$__cellvm_errhit
		fi
		if [[ $status == ok && $st != 0 ]]; then
			status=error
			builtin local why="exit status $st"
			[[ $__cellvm_exit ]] && why="exit $st"
			[[ $__cellvm_errhit ]] && why="exit status $st (set -e)"
			builtin printf '{"ev":"error","name":"ExitStatus","value":"%s","traceback":[]}\n' "$why" >&"$__cellvm_ev"
		fi
		__cellvm_status=$st
		builtin printf '{"ev":"done","status":"%s","interrupted":%s}\n' "$status" "$interrupted" >&"$__cellvm_ev"
		__cellvm_incell=
	}

	# A cell that ends the shell all the same (builtin exit, set -e
	# under an ERR trap of its own) says so; the supervisor reports the
	# cell lost.
	__cellvm_on_exit() {
		builtin local st=$?
		if [[ $__cellvm_incell && $BASHPID == "$__cellvm_pid" ]]; then
			builtin printf 'bash: the cell ended the shell (status %d): the next cell runs in a new one, without the variables, functions and working directory of this one\n' "$st" >&2
		fi
	}
	builtin trap '__cellvm_on_exit' EXIT

	builtin printf '{"ev":"ready","pid":%d,"version":"%s"}\n' "$$" "${BASH_VERSION%%[!0-9.]*}" >&"$__cellvm_ev"
	builtin trap '' INT
	__cellvm_status=0
fi

# __cellvm_depth is the length of BASH_SOURCE in the driver's loop: a
# longer one is the cell (or a function it called).
__cellvm_depth=${#BASH_SOURCE[@]}
builtin trap '__cellvm_on_err' ERR
while ((1)); do
	if [[ $__cellvm_incell ]]; then
		# A cell's "continue 2" (or more) ended it and came here.
		[[ $BASHPID == "$__cellvm_pid" ]] || builtin exit 0
		builtin trap - DEBUG
		__cellvm_ended 0
	fi
	# TMOUT= : a cell's TMOUT would time out the wait for a command.
	if ! TMOUT= IFS=' ' builtin read -r -u "$__cellvm_cmd" __cellvm_op __cellvm_n __cellvm_len; then
		builtin exit 0 # the supervisor is gone
	fi
	case $__cellvm_op in
	exec)
		__cellvm_code=
		[[ $__cellvm_len =~ ^[0-9]{1,10}$ ]] || builtin exit 2
		if ((__cellvm_len > 0)); then
			TMOUT= LC_ALL=C IFS= builtin read -r -N "$__cellvm_len" -d '' -u "$__cellvm_cmd" __cellvm_code || builtin exit 0
		fi
		__cellvm_int= __cellvm_exit= __cellvm_errhit= __cellvm_eoff= __cellvm_traced= __cellvm_incell=1
		builtin trap '__cellvm_on_int' INT
		builtin printf '{"ev":"started","n":%d}\n' "$__cellvm_n" >&"$__cellvm_ev"
		# $? is the last cell's status, as at a prompt; a cell's set -e
		# comes back (a failing command here would end the shell then).
		if [[ $__cellvm_errexit ]]; then
			builtin set -e
		else
			(builtin exit "$__cellvm_status")
		fi
		# The one-pass loop takes a cell's top-level break or continue.
		for __cellvm_once in 1; do
			builtin source <(builtin printf '%s' "$__cellvm_code") {__cellvm_cmd}<&- {__cellvm_ev}>&-
		done
		# set -x and -v end with their cell (the driver's lines would be
		# traced): these two lines are the last of a trace.
		__cellvm_st=$?
		builtin set +xv
		# A subshell of the cell that returned from it ("( return )") is
		# not the driver.
		[[ $BASHPID == "$__cellvm_pid" ]] || builtin exit "$__cellvm_st"
		builtin trap - DEBUG
		__cellvm_ended "$__cellvm_st"
		;;
	reap)
		# bash reaps its children itself.
		builtin printf '{"ev":"reaped","n":0}\n' >&"$__cellvm_ev"
		;;
	reseed)
		# SRANDOM (bash 5.1) is the kernel's getrandom; older ones read
		# the device. Not the state a VM snapshot cloned.
		if [[ ${SRANDOM-} ]]; then
			RANDOM=$SRANDOM
		else
			RANDOM=$(($(od -An -N4 -tu4 /dev/urandom 2>/dev/null || echo $$)))
		fi
		builtin printf '{"ev":"reseeded","numpy":false}\n' >&"$__cellvm_ev"
		;;
	esac
done

# Only a cell's "break 2" (or more) gets here: it ended the cell and the
# loop. The cell is answered and the loop entered again.
[[ $BASHPID == "$__cellvm_pid" ]] || builtin exit 0
builtin trap - DEBUG
[[ $__cellvm_incell ]] && __cellvm_ended 0
builtin source "${BASH_SOURCE[0]}"
