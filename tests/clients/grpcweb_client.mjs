// Parca's own client library (@parca/client) asks Strata the questions
// tests/integration/test_npm_clients.py also asks with grpcio: over gRPC-Web on the HTTP port
// (@protobuf-ts/grpcweb-transport with fetch, binary and text) and over native gRPC on the gRPC
// port (@protobuf-ts/grpc-transport on @grpc/grpc-js), SOURCE included (its sources uploaded by
// the Python side). Prints one JSON line per call: the answer
// as @parca/client decoded it, encoded again (base64 of toBinary), or the error's code and message.
//
//   node --import ./register.mjs grpcweb_client.mjs <http base URL> <grpc host:port> <tenant> \
//        <start s> <end s>
import {
  HasProfileDataRequest,
  HasProfileDataResponse,
  LabelsRequest,
  LabelsResponse,
  ProfileTypesRequest,
  ProfileTypesResponse,
  QueryRangeRequest,
  QueryRangeResponse,
  QueryRequest,
  QueryRequest_Mode,
  QueryRequest_ReportType,
  QueryResponse,
  QueryServiceClient,
  SeriesRequest,
  SeriesResponse,
  ShareProfileRequest,
  ShareProfileResponse,
  ValuesRequest,
  ValuesResponse,
} from '@parca/client';
import { ChannelCredentials } from '@grpc/grpc-js';
import { arrowRows } from './arrow_rows.mjs';
import { GrpcTransport } from '@protobuf-ts/grpc-transport';
import { GrpcWebFetchTransport } from '@protobuf-ts/grpcweb-transport';

const [base, grpcAddress, tenant, startS, endS] = process.argv.slice(2);
const ts = (s) => ({ seconds: BigInt(s), nanos: 0 });
const query = 'process_cpu:samples:count:cpu:nanoseconds:delta{}';

async function ask(format, name, call, type) {
  try {
    const { response } = await call;
    const bytes = type.toBinary(response);
    const answer = { format, name, ok: true, b64: Buffer.from(bytes).toString('base64') };
    if (response.report?.oneofKind === 'flamegraphArrow') answer.arrow = arrowRows(response.report.flamegraphArrow.record);
    if (response.report?.oneofKind === 'tableArrow') answer.arrow = arrowRows(response.report.tableArrow.record);
    if (response.report?.oneofKind === 'source' && response.report.source.record.length > 0)
      answer.arrow = arrowRows(response.report.source.record);
    console.log(JSON.stringify(answer));
  } catch (e) {
    console.log(JSON.stringify({ format, name, ok: false, code: String(e.code), message: e.message }));
  }
}

function transportFor(format) {
  const meta = { 'x-scope-orgid': tenant };
  if (format === 'grpc')
    return new GrpcTransport({ host: grpcAddress, channelCredentials: ChannelCredentials.createInsecure(), meta });
  return new GrpcWebFetchTransport({ baseUrl: base, format, meta });
}

for (const format of ['binary', 'text', 'grpc']) {
  const transport = transportFor(format);
  const client = new QueryServiceClient(transport);
  const range = { start: ts(startS), end: ts(endS) };
  await ask(format, 'ProfileTypes', client.profileTypes(ProfileTypesRequest.create()), ProfileTypesResponse);
  await ask(format, 'Labels', client.labels(LabelsRequest.create()), LabelsResponse);
  await ask(format, 'Values', client.values(ValuesRequest.create({ labelName: 'job' })), ValuesResponse);
  await ask(format, 'QueryRange', client.queryRange(QueryRangeRequest.create({ query, ...range, sumBy: ['job'] })), QueryRangeResponse);
  for (const [name, reportType] of [
    ['Query/FLAMEGRAPH_TABLE', QueryRequest_ReportType.FLAMEGRAPH_TABLE],
    ['Query/TOP', QueryRequest_ReportType.TOP],
    ['Query/PPROF', QueryRequest_ReportType.PPROF],
    ['Query/FLAMEGRAPH_ARROW', QueryRequest_ReportType.FLAMEGRAPH_ARROW],
    ['Query/TABLE_ARROW', QueryRequest_ReportType.TABLE_ARROW],
    ['Query/CALLGRAPH', QueryRequest_ReportType.CALLGRAPH],
    ['Query/FLAMECHART', QueryRequest_ReportType.FLAMECHART],
    ['Query/PROFILE_METADATA', QueryRequest_ReportType.PROFILE_METADATA],
  ]) {
    const request = QueryRequest.create({
      mode: QueryRequest_Mode.MERGE,
      reportType,
      options: { oneofKind: 'merge', merge: { query, ...range } },
    });
    await ask(format, name, client.query(request), QueryResponse);
  }
  // SOURCE: the uploaded app.go with per-line values, and Parca UI's "are there sources?" probe
  for (const [name, sourceOnly] of [['Query/SOURCE', false], ['Query/SOURCE/exists', true]]) {
    const request = QueryRequest.create({
      mode: QueryRequest_Mode.MERGE,
      reportType: QueryRequest_ReportType.SOURCE,
      sourceReference: { buildId: '4e504d6275696c64', filename: 'app.go', sourceOnly },
      options: { oneofKind: 'merge', merge: { query, ...range } },
    });
    await ask(format, name, client.query(request), QueryResponse);
  }
  // Series (unimplemented, as in Parca) and ShareProfile (a link to the stored pprof)
  await ask(format, 'Series', client.series(SeriesRequest.create({ match: [query], ...range })), SeriesResponse);
  const shared = QueryRequest.create({
    mode: QueryRequest_Mode.MERGE,
    reportType: QueryRequest_ReportType.FLAMEGRAPH_TABLE,
    options: { oneofKind: 'merge', merge: { query, ...range } },
  });
  await ask(format, 'ShareProfile', client.shareProfile(ShareProfileRequest.create({ queryRequest: shared, description: 'npm' })), ShareProfileResponse);
  await ask(format, 'HasProfileData', client.hasProfileData(HasProfileDataRequest.create()), HasProfileDataResponse);
  await ask(format, 'QueryRange/bad', client.queryRange(QueryRangeRequest.create({ query: 'not a selector{', ...range })), QueryRangeResponse);
  // Grafana's Parca data source: QueryRange with only query, start, end and limit (no step)
  await ask(format, 'QueryRange/grafana', client.queryRange(QueryRangeRequest.create({ query, ...range, limit: 1 })), QueryRangeResponse);
  if (format === 'grpc') transport.close();
}
