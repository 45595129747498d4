package bench

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Row is one measured subject of a figure: its samples (one per round) and the rows of the same
// figure it is compared to.
type Row struct {
	Subject string
	Unit    string
	Samples []float64
	// Against names the baseline rows (same figure) whose median this row's median is divided by.
	// A row with no Against is itself a baseline.
	Against []string
	// Failures counts rounds that did not produce a sample; Error is the last failure.
	Failures int
	Error    string
}

// Figure is one table of the report.
type Figure struct {
	Title string
	Rows  []*Row
	Notes []string
}

// Results collects figures in the order they are first mentioned. It is not safe for concurrent
// use: the harness measures one thing at a time on purpose.
type Results struct {
	Figures []*Figure
}

func (r *Results) figure(title string) *Figure {
	for _, f := range r.Figures {
		if f.Title == title {
			return f
		}
	}
	f := &Figure{Title: title}
	r.Figures = append(r.Figures, f)
	return f
}

func (r *Results) row(figure, subject, unit string) *Row {
	f := r.figure(figure)
	for _, row := range f.Rows {
		if row.Subject == subject {
			if row.Unit == "" {
				row.Unit = unit
			}
			return row
		}
	}
	row := &Row{Subject: subject, Unit: unit}
	f.Rows = append(f.Rows, row)
	return row
}

// Add appends one round's sample to the row subject of figure.
func (r *Results) Add(figure, subject, unit string, v float64) {
	row := r.row(figure, subject, unit)
	row.Samples = append(row.Samples, v)
}

// Fail records a round of subject that produced no sample, and why.
func (r *Results) Fail(figure, subject, unit string, err error) {
	row := r.row(figure, subject, unit)
	row.Failures++
	row.Error = err.Error()
}

// Compare makes subject's ratio column compare it with the given baseline rows of figure.
func (r *Results) Compare(figure, subject string, against ...string) {
	row := r.row(figure, subject, "")
	row.Against = append(row.Against, against...)
}

// Note adds a line printed under figure's table (setup, scale, what was left out and why).
func (r *Results) Note(figure, format string, args ...any) {
	f := r.figure(figure)
	f.Notes = append(f.Notes, fmt.Sprintf(format, args...))
}

// Stats are the summary of a row's samples.
type Stats struct {
	N                int
	Min, Median, Max float64
	HasSamples       bool
}

// Summarize returns min, median and max of samples (the median of an even count is the mean of
// the two middle values).
func Summarize(samples []float64) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stats{N: len(s), Min: s[0], Median: med, Max: s[len(s)-1], HasSamples: true}
}

// Percentile returns the p-th percentile (0 < p <= 100) of samples by the nearest-rank method,
// or NaN for no samples.
func Percentile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(s) {
		rank = len(s)
	}
	return s[rank-1]
}

// FormatNumber prints v with a precision that suits its size.
func FormatNumber(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "n/a"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 0.1 || a == 0:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// ratio is "<median / baseline median>x <baseline>" for each baseline of row, "baseline" for a
// row compared with nothing.
func (f *Figure) ratio(row *Row) string {
	if len(row.Against) == 0 {
		return "baseline"
	}
	st := Summarize(row.Samples)
	var parts []string
	for _, name := range row.Against {
		var base *Row
		for _, b := range f.Rows {
			if b.Subject == name {
				base = b
			}
		}
		bs := Stats{}
		if base != nil {
			bs = Summarize(base.Samples)
		}
		if !st.HasSamples || !bs.HasSamples || bs.Median == 0 {
			parts = append(parts, "n/a vs "+name)
			continue
		}
		parts = append(parts, fmt.Sprintf("%sx vs %s", FormatNumber(st.Median/bs.Median), name))
	}
	return strings.Join(parts, "; ")
}

// WriteMarkdown writes every figure as a markdown table followed by its notes.
// A row that was never measured (no sample, no failure: only named by Compare) is left out, and
// so is a figure whose rows all are (one not asked for, e.g. figure 2 with BENCH_FIGURES=1).
func (r *Results) WriteMarkdown(w io.Writer) {
	for _, f := range r.Figures {
		var rows []*Row
		for _, row := range f.Rows {
			if len(row.Samples) > 0 || row.Failures > 0 {
				rows = append(rows, row)
			}
		}
		if len(f.Rows) > 0 && len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "### %s\n\n", f.Title)
		if len(rows) > 0 {
			fmt.Fprintln(w, "| subject | rounds | min | median | max | unit | ratio (median) |")
			fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|---|")
			for _, row := range rows {
				st := Summarize(row.Samples)
				rounds := fmt.Sprint(st.N)
				if row.Failures > 0 {
					rounds += fmt.Sprintf(" (+%d failed)", row.Failures)
				}
				min, med, max := "-", "-", "-"
				if st.HasSamples {
					min, med, max = FormatNumber(st.Min), FormatNumber(st.Median), FormatNumber(st.Max)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n",
					row.Subject, rounds, min, med, max, row.Unit, f.ratio(row))
			}
			fmt.Fprintln(w)
		}
		for _, row := range f.Rows {
			if row.Error != "" {
				fmt.Fprintf(w, "- %s failed: %s\n", row.Subject, oneLine(row.Error))
			}
		}
		for _, n := range f.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		fmt.Fprintln(w)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
