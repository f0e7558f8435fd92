"""The worker process: wait, claim, run handlers, record, heartbeat, drain."""
