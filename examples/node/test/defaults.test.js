// The receiver's defaults fit beside `make run`, as the README says.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { DEFAULT_PORT } from "../server.js";

// claimdPorts are the ports `make run` serves on: gRPC and HTTP.
const claimdPorts = [50051, 8080];

test("the default port is not claimd's, and the README names it", () => {
  assert.ok(!claimdPorts.includes(DEFAULT_PORT), `DEFAULT_PORT ${DEFAULT_PORT} is one make run holds`);
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  assert.ok(readme.includes(`\`PORT\` (default ${DEFAULT_PORT})`), "README does not give PORT's default");
  assert.ok(readme.includes(`http://127.0.0.1:${DEFAULT_PORT}/webhooks/stripe`), "README's curl does not use the default port");
});
