"""The scrape side: the one metric table, its rendering, the render cache and the HTTP site."""
