"""Cluster-wide loops: cron, promoter, reaper, dead-worker sweep, retention."""
