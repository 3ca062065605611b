"""The `pgcheckpoint` command line, driven as users and deploy scripts run it.

One module per command module of `pgcheckpoint.cli`: `test_migrate_cli.py`
also covers what every command shares (connection options, messages, exit
codes, the console entry point).
"""
