"""The process's health, as operators see it on `/metrics` (registry/http/metrics_api.py)
and `GET status`: `request_stats` (requests by endpoint), `histogram`s, `loop_lag` (how late the
event loop runs), `memory` (the watermark that refuses new instances before the system kills
the process), `heap` (short garbage collections with 100 000 instances) and `activity` (a
periodic summary of what clients did, in place of a log line each).
"""
