package app

import (
	"os/exec"
	"regexp"
	"testing"
)

// TestTheGatewayLinksNoGRPCServerCode: the gateway shares the pusher's
// rules through the leaf package limits, not through the pusher, so its
// binary links neither the pusher nor gRPC's server-side health,
// reflection and middleware; nor the OpenTelemetry SDK, which only its
// tests use as an OTLP client (the OTLP endpoints use the Collector's pdata).
func TestTheGatewayLinksNoGRPCServerCode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "../../services/ferry-gateway").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if bad := regexp.MustCompile(`(?m)^.*(ferry/pusher|grpc/(health|reflection)|go-grpc-middleware|opentelemetry.io/otel/sdk).*$`).FindAll(out, -1); len(bad) > 0 {
		t.Errorf("the gateway links %q", bad)
	}
}
