"""The kube-scheduler extender: capacity table, decisions, reservations, repacking, dashboard."""
