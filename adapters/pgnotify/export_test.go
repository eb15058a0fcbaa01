package pgnotify

import "time"

// SetListenCheck sets how long the listener waits for news before it
// pings, and for the ping's answer (listenIdle, listenPing). Call it before
// Start.
func (n *Notifier) SetListenCheck(idle, ping time.Duration) { n.idle, n.ping = idle, ping }

// SetSendWait sets how long a send may take before it is tried again
// (sendWait). Call it before Start.
func (n *Notifier) SetSendWait(d time.Duration) { n.sendWait = d }
