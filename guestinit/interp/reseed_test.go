package interp

import "testing"

// TestReseed: after Reseed, the interpreter's random module no longer
// continues the sequence it was seeded with, the variables stay, and the
// execution count is not moved by it.
func TestReseed(t *testing.T) {
	in := newTestInterp(t, nil)
	if numpy, err := in.Reseed(); err != nil || numpy {
		t.Fatalf("Reseed before any cell = %v, %v; want nothing to do", numpy, err)
	}
	expectOK(t, run(t, in, "import random\nrandom.seed(42)\nexpected = random.Random(42).random()\nkept = 'yes'"))
	numpy, err := in.Reseed()
	if err != nil {
		t.Fatal(err)
	}
	if numpy {
		t.Error("NumPy reported reseeded though no cell imported it")
	}
	res := run(t, in, "(random.random() != expected, kept)")
	if got := mainText(t, res); got != "(True, 'yes')" {
		t.Fatalf("after Reseed: %s, want the seeded sequence broken and the variables kept", got)
	}
	if res.ExecutionCount != 2 {
		t.Errorf("execution count %d after two cells and a reseed", res.ExecutionCount)
	}
	// Without a reseed the seeded sequence continues (the test can fail).
	expectOK(t, run(t, in, "random.seed(42)"))
	if got := mainText(t, run(t, in, "random.random() == expected")); got != "True" {
		t.Fatalf("without a reseed: %s", got)
	}
}
