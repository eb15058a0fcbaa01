package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank percentile p (0 < p <= 100) of samples:
// the smallest sample such that at least p% of the samples are at or below
// it. samples is sorted in place. An empty slice gives 0.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	rank := int(math.Ceil(p / 100 * float64(len(samples))))
	rank = min(max(rank, 1), len(samples))
	return samples[rank-1]
}

// Summary is one figure over several runs: the median and the range.
type Summary struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

// Summarize takes the median, minimum and maximum of the runs (the mean of
// the two middle values for an even count). No runs give a zero Summary.
func Summarize(runs []float64) Summary {
	if len(runs) == 0 {
		return Summary{}
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Median: med, Min: s[0], Max: s[len(s)-1], Runs: slices.Clone(runs)}
}

// summaries summarises each name's runs.
func summaries(runs map[string][]float64) map[string]Summary {
	m := make(map[string]Summary, len(runs))
	for name, v := range runs {
		m[name] = Summarize(v)
	}
	return m
}

// String shows the median and the range, "1234 [1100–1300]", with as many
// decimals as the size of the median calls for.
func (s Summary) String() string {
	if len(s.Runs) == 0 {
		return "-"
	}
	if len(s.Runs) == 1 {
		return num(s.Median)
	}
	return fmt.Sprintf("%s [%s–%s]", num(s.Median), num(s.Min), num(s.Max))
}

// num prints v with 3 significant digits or more: 12345, 123, 12.3, 1.23, 0.123.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// ms converts a duration to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rate is count per second over d (0 for an empty interval).
func rate(count int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(count) / d.Seconds()
}

// Ratio divides two medians; 0 when the denominator is 0.
func Ratio(a, b Summary) float64 {
	if b.Median == 0 {
		return 0
	}
	return a.Median / b.Median
}
