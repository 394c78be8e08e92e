"""Campaigns: a scheduled matrix run on its hosts, surviving any crash.

- record: the settings and the campaign record journaled at creation; create; resume_action
- executor: the coordinator (one worker per host, state changes, quarantine, hand-over)
- worker: one host's runs, its session, boot and readiness
- engine_runs: the spec of an end-to-end engine run
- watch: progress read from the database (the fold is bench.execute.progress)
"""
