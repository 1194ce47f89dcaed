"""The console's JSON API: the route table (endpoints), what every handler shares (request),
the endpoints by resource (meta, sessions, flows, jobs; a session's time and tools, sessionview;
a flow's life, lifeview), and the OpenAPI description made from the table."""
