"""v2_server.py (mcp==2.3 MCPServer) with the OpenTelemetry SDK switched on.

The MCP Python SDK records a span for every request it serves, continuing the
W3C trace context it finds in the request's `_meta`; with no SDK installed those
spans go nowhere. This wrapper installs the OpenTelemetry SDK's tracer provider
with its OTLP/HTTP exporter (to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), so a test can
see whether the server's spans sit under tasklift's. Same flags as v2_server.py.
"""

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "py-v2-peer"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)

import v2_server  # noqa: E402  (after the provider: the SDK takes its tracer at import)

if __name__ == "__main__":
    v2_server.main()
