"""The hosting kit every actor uses: handler declarations, the request context and clock, ports, leases.

Imports no actor and never `nats`: the runtime binds these to the bus."""
