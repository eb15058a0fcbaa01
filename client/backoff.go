package client

import (
	"math/rand/v2"
	"time"
)

// backoff spaces out reconnection attempts: the delay doubles from min up
// to max, and each wait is drawn at random from its upper half ("equal
// jitter"), so that many workers dropped at once by a restarting server do
// not all knock again at the same moment, while none waits less than half
// the current delay.
type backoff struct {
	min, max time.Duration
	attempt  int
	// rand returns a number in [0, 1); tests replace it.
	rand func() float64
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, rand: rand.Float64}
}

// next returns the wait before the next attempt and counts the attempt.
func (b *backoff) next() time.Duration {
	d := b.max
	// Stop doubling once past max; this also keeps the shift from overflowing.
	if b.attempt < 32 {
		if exp := b.min << b.attempt; exp > 0 && exp < b.max {
			d = exp
		}
	}
	b.attempt++
	half := d / 2
	return half + time.Duration(b.rand()*float64(d-half))
}

// reset starts over from min, after a connection that held.
func (b *backoff) reset() { b.attempt = 0 }
