package worker

// PublishedLifecycleEvents returns how many lifecycle events a's hub has
// published, so that tests can wait until the agent has handled one.
func PublishedLifecycleEvents(a *Agent) uint64 { return a.hub.Seq() }
