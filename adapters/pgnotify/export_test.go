package pgnotify

import "time"

// SetListenCheck sets how long the listener waits for news before it
// pings, and for the ping's answer (listenIdle, listenPing). Call it before
// Start.
func (n *Notifier) SetListenCheck(idle, ping time.Duration) { n.idle, n.ping = idle, ping }
