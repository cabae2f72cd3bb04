"""What both daemons (the exporter and the analytics daemon) share and neither owns: the HTTP
server, the page templates' common look, settings, logging and cron helpers. It imports neither
``exporter`` nor ``analytics``."""
