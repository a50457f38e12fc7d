"""Stack helpers that both the test suite (tests/) and the benchmarks (bench/) run.

Why a package of its own: broker and proxy processes on free loopback ports
(:mod:`testbed.processes`, :mod:`testbed.proxy_process`), throwaway certificates
(:mod:`testbed.certs`), the TLS/SASL front Tansu lacks (:mod:`testbed.sasl_front`, its SASL
server :mod:`testbed.sasl_server`, ACL denials :mod:`testbed.fetch_acl` and audit
:mod:`testbed.front_audit`) with the frame relay (:mod:`testbed.relay_core`) and cluster
address rewriting (:mod:`testbed.cluster_rewrite`) under it, the sectioned results pages
(:mod:`testbed.report`) and seeded synthetic request logs (:mod:`testbed.synthetic_log`) are
needed by both. Living here, neither tests/ nor bench/ imports the other (tests/unit/
test_layout.py enforces it), and testbed imports neither. Like tests/ and bench/, it is not
part of the installed distribution. Helpers only the tests use stay in tests/support.
"""
