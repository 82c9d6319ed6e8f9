package agent

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// ansiPattern matches terminal escape sequences: CSI (colours, cursor
// moves), OSC (titles, hyperlinks) ended by BEL or ST, and the two-byte
// escapes. IPython tracebacks and many libraries colour their output; to a
// model the codes are noise that costs tokens and hides the text.
var ansiPattern = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]`)

// StripANSI removes terminal escape sequences, and resolves carriage
// returns the way a terminal shows them (a progress bar redrawn a hundred
// times becomes its last state), so the model reads what a person would see.
func StripANSI(s string) string {
	if strings.IndexByte(s, 0x1b) >= 0 {
		s = ansiPattern.ReplaceAllString(s, "")
		// A lone ESC left over from a cut sequence is dropped too.
		s = strings.ReplaceAll(s, "\x1b", "")
	}
	if strings.IndexByte(s, '\r') < 0 {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if j := strings.LastIndexByte(strings.TrimRight(l, "\r"), '\r'); j >= 0 {
			lines[i] = l[j+1:]
		} else {
			lines[i] = strings.TrimRight(l, "\r")
		}
	}
	return strings.Join(lines, "\n")
}

// ClipMiddle keeps the first and last parts of s so that at most limit
// characters (runes) of it remain, and puts a line stating how many
// characters were cut where they were. It returns the text and the number
// of characters cut. A limit below 1 means no limit.
func ClipMiddle(s string, limit int) (string, int) {
	if limit < 1 {
		return s, 0
	}
	n := utf8.RuneCountInString(s)
	if n <= limit {
		return s, 0
	}
	head := limit * 3 / 5
	tail := limit - head
	cut := n - head - tail
	runes := []rune(s)
	return string(runes[:head]) + CutNote(cut) + string(runes[n-tail:]), cut
}

// CutNote is the line that stands where characters were cut.
func CutNote(cut int) string {
	return fmt.Sprintf("\n... [%d characters cut from the middle] ...\n", cut)
}

// lastLines returns the last n lines of s and how many were dropped.
func lastLines(lines []string, n int) ([]string, int) {
	if n < 1 || len(lines) <= n {
		return lines, 0
	}
	return lines[len(lines)-n:], len(lines) - n
}
