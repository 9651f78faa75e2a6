/**
 * bench_duplicates: the client's cost of one duplicate of a settled delivery
 * against a real claimd, with and without the local cache (not a test):
 *   npm run build && CLAIMD_BIN=.build/claimd node dist/test/bench_duplicates.js [n]
 * prints wall time and client CPU (process.cpuUsage) per duplicate.
 */
import { createClient, guard, Outcome } from "../src/index.js";
import { startClaimd } from "../src/testing.js";
import { claimdBin, eventId, NS } from "./helpers.js";

const n = Number(process.argv[2] ?? 2000);
const server = await startClaimd({ bin: claimdBin() });
try {
  for (const localCache of [undefined, 1024]) {
    const client = createClient(server.target, localCache === undefined ? {} : { localCache });
    const req = { namespace: NS, provider: "stripe", eventId: eventId() };
    await guard(client, req, () => ({ ok: true }));
    for (let i = 0; i < 200; i++) {
      await guard(client, req, () => ({ ok: true })); // warm up
    }
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) {
      const r = await guard(client, req, () => ({ ok: true }));
      if (r.outcome !== Outcome.DUPLICATE) {
        throw new Error(`duplicate ${i}: outcome ${r.outcome}`);
      }
    }
    const wallUs = Number(process.hrtime.bigint() - t0) / 1000 / n;
    const cpu = process.cpuUsage(cpu0);
    const cpuUs = (cpu.user + cpu.system) / n;
    console.log(`localCache=${localCache ?? "off"}: ${wallUs.toFixed(1)} µs wall, ${cpuUs.toFixed(1)} µs client CPU per duplicate (n=${n})`);
    client.close();
  }
} finally {
  await server.stop();
}
