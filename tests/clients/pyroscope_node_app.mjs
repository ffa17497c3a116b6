// A Node.js program profiled by npm's @pyroscope/nodejs, pushing to Strata's POST /ingest
// (tests/integration/test_pyroscope_ingest.py). Usage: node pyroscope_node_app.mjs HTTP_URL TENANT
// SECONDS. It spends its time in hotLoop and allocates in allocateChunk, so the wall and heap
// profiles it sends have known hot functions; it exits after the SDK's last flush.
import Pyroscope from '@pyroscope/nodejs';

const [serverAddress, tenantID, seconds] = process.argv.slice(2);
Pyroscope.init({
  serverAddress,
  tenantID,
  appName: 'nodeapp',
  tags: { region: 'eu' },
  flushIntervalMs: 1000,
});
Pyroscope.start();

function hotLoop() {
  let x = 0;
  for (let i = 0; i < 2e6; i++) x += Math.sqrt(i);
  return x;
}

const kept = [];
function allocateChunk() {
  kept.push(new Array(2000).fill(kept.length));
  if (kept.length > 2000) kept.splice(0, 1000);
}

const end = Date.now() + Number(seconds) * 1000;
function spin() {
  if (Date.now() < end) {
    hotLoop();
    allocateChunk();
    setImmediate(spin);
    return;
  }
  Pyroscope.stop().then(() => process.exit(0), (e) => {
    console.error(e);
    process.exit(1);
  });
}
spin();
