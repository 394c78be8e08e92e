"""Campaigns: a scheduled matrix run on its hosts, surviving any crash.

- record: the settings and the campaign record journaled at creation; create; resume_action
- executor: the coordinator (one worker per host, state changes, quarantine, hand-over)
- worker: one host's runs, its session, boot and readiness
- engine_runs: the spec of an end-to-end engine run
- onerun: `bench run`, one cell per host as a campaign of its own
- preflight: the hosts' facts before a campaign exists, and each run's spec (run_spec)
- watch: progress read from the database (the fold is bench.execute.progress)
"""
