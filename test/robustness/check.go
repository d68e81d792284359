package robustness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation describes one job whose history is not linearizable.
type Violation struct {
	Key string
	// Ops is the number of operations on the job; Linearized how many of
	// them the longest partial linearization porcupine found orders.
	Ops, Linearized int
	// State is the model's state after that partial linearization.
	State string
	// Last are the last operations of that partial linearization (up to
	// five), and Stuck the operations that could not follow it although
	// they had to (they returned before any other unlinearized operation
	// was called) — usually the offending answer.
	Last, Stuck []string
	// At is the earliest return among the operations that cannot follow:
	// by then the history had stopped being linearizable.
	At time.Duration
}

// String is the violation as the failure summary prints it: the job, how
// far porcupine got, and the operations around the point it got stuck.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: not linearizable: %d of %d operations linearized, then the model is %s\n", v.Key, v.Linearized, v.Ops, v.State)
	for _, s := range v.Last {
		fmt.Fprintf(&b, "    linearized  %s\n", s)
	}
	for _, s := range v.Stuck {
		fmt.Fprintf(&b, "    CANNOT FOLLOW %s\n", s)
	}
	return b.String()
}

// CheckResult is the verdict of Check.
type CheckResult struct {
	// Result is porcupine's: Ok, Illegal, or Unknown (the check timed
	// out: no verdict).
	Result porcupine.CheckResult
	// Violations lists the jobs that are not linearizable (Illegal).
	Violations []Violation
	// Ops is the number of operations checked; Stats what History did.
	Ops   int
	Stats HistoryStats
	// Took is the time the check took.
	Took time.Duration
	// Visualization and HistoryFile are the files written (only when the
	// result is not Ok, and outDir was given).
	Visualization, HistoryFile string
}

// Check checks the recorded operations against Model with porcupine,
// bounded by timeout. If the history is not linearizable (or the check
// timed out) and outDir is not empty, it writes porcupine's
// visualisation (linearizability.html, with the faults as annotations)
// and the operations (history.json) there; an error is returned only if
// those files cannot be written.
func Check(ops []Op, faults []Fault, timeout time.Duration, outDir string) (CheckResult, error) {
	history, stats := History(ops)
	model := Model()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	cr := CheckResult{Result: res, Ops: len(history), Stats: stats, Took: time.Since(start)}
	if res == porcupine.Illegal {
		cr.Violations = violations(model, history, info)
	}
	if res == porcupine.Ok || outDir == "" {
		return cr, nil
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return cr, fmt.Errorf("create %s: %w", outDir, err)
	}
	info.AddAnnotations(annotations(faults))
	cr.Visualization = filepath.Join(outDir, "linearizability.html")
	if err := porcupine.VisualizePath(model, info, cr.Visualization); err != nil {
		return cr, fmt.Errorf("write the visualisation: %w", err)
	}
	cr.HistoryFile = filepath.Join(outDir, "history.json")
	b, err := json.MarshalIndent(struct {
		Ops    []Op
		Faults []Fault
	}{ops, faults}, "", " ")
	if err != nil {
		return cr, fmt.Errorf("encode the history: %w", err)
	}
	if err := os.WriteFile(cr.HistoryFile, b, 0o644); err != nil {
		return cr, fmt.Errorf("write the history: %w", err)
	}
	return cr, nil
}

// annotations draws the faults on a "nemesis" line of the visualisation.
func annotations(faults []Fault) []porcupine.Annotation {
	out := make([]porcupine.Annotation, 0, len(faults))
	for _, f := range faults {
		out = append(out, porcupine.Annotation{Tag: "nemesis", Start: int64(f.Start), End: int64(f.End),
			Description: f.Desc, BackgroundColor: "#f6c6c6"})
	}
	return out
}

// violations names the partitions (jobs) porcupine could not linearize,
// with the operations around the point where it got stuck.
func violations(model porcupine.Model, history []porcupine.Operation, info porcupine.LinearizationInfo) []Violation {
	keys := Keys(history)
	parts := model.Partition(history)
	partials := info.PartialLinearizations()
	var out []Violation
	for p, ops := range parts {
		longest := longestOf(partials[p])
		if len(longest) == len(ops) {
			continue
		}
		v := Violation{Key: keys[p], Ops: len(ops), Linearized: len(longest)}
		state := model.Init()
		done := make([]bool, len(ops))
		for _, id := range longest {
			_, state = model.Step(state, ops[id].Input, ops[id].Output)
			done[id] = true
		}
		v.State = model.DescribeState(state)
		for _, id := range longest[max(0, len(longest)-5):] {
			v.Last = append(v.Last, describeOp(model, ops[id]))
		}
		// The operations that must come next: every unlinearized one that
		// returned before the earliest call among the unlinearized.
		first := int64(-1)
		for id, op := range ops {
			if !done[id] && (first < 0 || op.Return < first) {
				first = op.Return
			}
		}
		v.At = time.Duration(first)
		for id, op := range ops {
			if !done[id] && op.Call <= first && len(v.Stuck) < 5 {
				v.Stuck = append(v.Stuck, describeOp(model, op))
			}
		}
		out = append(out, v)
	}
	return out
}

func longestOf(ls [][]int) []int {
	var best []int
	for _, l := range ls {
		if len(l) > len(best) {
			best = l
		}
	}
	return best
}

func describeOp(model porcupine.Model, op porcupine.Operation) string {
	return fmt.Sprintf("[%s … %s] via %v: %s", time.Duration(op.Call).Round(time.Millisecond),
		time.Duration(op.Return).Round(time.Millisecond), op.Metadata, model.DescribeOperation(op.Input, op.Output))
}
