#!/usr/bin/python3
"""Checks Strata's .proto files against the Parca wire API facts (field numbers and types).

Generates the Python stubs into a temporary directory with gen_stubs.sh, imports them, and
compares every message, field, enum and service method against the tables below, transcribed
from the reference (sections 1.1, 1.2, 1.3, 1.4, 1.6 of parca-api.md) plus pprof's profile.proto.
Each listed message must have exactly the listed fields: nothing missing, nothing extra.
Exits non-zero on any mismatch. Run with /usr/bin/python3 (Debian's protobuf + grpc_tools).
"""
import importlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

PS = "parca.profilestore.v1alpha1"
MS = "parca.metastore.v1alpha1"
Q = "parca.query.v1alpha1"
SC = "parca.scrape.v1alpha1"
DI = "parca.debuginfo.v1alpha1"
PU = "push.v1"
PP = "perftools.profiles"
TS = "google.protobuf.Timestamp"
DUR = "google.protobuf.Duration"

# message -> [(field, number, type)]. Type: a scalar name, a message or enum full name, or
# "repeated X", or "map<K,V>". A field declared `optional` is marked "optional X" (it must sit
# alone in a oneof named _<field>, which is proto3 optional on the wire).
MESSAGES = {
    # 1.1 parca.profilestore.v1alpha1
    f"{PS}.WriteRawRequest": [("tenant", 1, "string"), ("series", 2, f"repeated {PS}.RawProfileSeries"),
                              ("normalized", 3, "bool")],
    f"{PS}.WriteRawResponse": [],
    f"{PS}.RawProfileSeries": [("labels", 1, f"{PS}.LabelSet"), ("samples", 2, f"repeated {PS}.RawSample")],
    f"{PS}.LabelSet": [("labels", 1, f"repeated {PS}.Label")],
    f"{PS}.Label": [("name", 1, "string"), ("value", 2, "string")],
    f"{PS}.RawSample": [("raw_profile", 1, "bytes"), ("executable_info", 2, f"repeated {PS}.ExecutableInfo")],
    f"{PS}.ExecutableInfo": [("elf_type", 1, "uint32"), ("load_segment", 2, f"{PS}.LoadSegment")],
    f"{PS}.LoadSegment": [("offset", 1, "uint64"), ("vaddr", 2, "uint64")],
    f"{PS}.WriteRequest": [("record", 1, "bytes")],
    f"{PS}.WriteResponse": [("record", 1, "bytes")],
    f"{PS}.WriteArrowRequest": [("ipc_buffer", 1, "bytes")],
    f"{PS}.WriteArrowResponse": [],
    f"{PS}.AgentsRequest": [],
    f"{PS}.AgentsResponse": [("agents", 1, f"repeated {PS}.Agent")],
    f"{PS}.Agent": [("id", 1, "string"), ("last_error", 2, "string"), ("last_push", 3, TS),
                    ("last_push_duration", 4, DUR)],
    # 1.3 parca.query.v1alpha1
    f"{Q}.ProfileTypesRequest": [("start", 1, f"optional {TS}"), ("end", 2, f"optional {TS}")],
    f"{Q}.ProfileTypesResponse": [("types", 1, f"repeated {Q}.ProfileType")],
    f"{Q}.ProfileType": [("name", 1, "string"), ("sample_type", 2, "string"), ("sample_unit", 3, "string"),
                         ("period_type", 4, "string"), ("period_unit", 5, "string"), ("delta", 6, "bool")],
    f"{Q}.QueryRangeRequest": [("query", 1, "string"), ("start", 2, TS), ("end", 3, TS), ("limit", 4, "uint32"),
                               ("step", 5, DUR), ("sum_by", 6, "repeated string")],
    f"{Q}.QueryRangeResponse": [("series", 1, f"repeated {Q}.MetricsSeries")],
    f"{Q}.MetricsSeries": [("labelset", 1, f"{PS}.LabelSet"), ("samples", 2, f"repeated {Q}.MetricsSample"),
                           ("period_type", 3, f"{Q}.ValueType"), ("sample_type", 4, f"{Q}.ValueType")],
    f"{Q}.MetricsSample": [("timestamp", 1, TS), ("value", 2, "int64"), ("value_per_second", 3, "double"),
                           ("duration", 4, "int64"), ("count", 5, "int32")],
    f"{Q}.ValueType": [("type", 1, "string"), ("unit", 2, "string")],
    f"{Q}.MergeProfile": [("query", 1, "string"), ("start", 2, TS), ("end", 3, TS)],
    f"{Q}.SingleProfile": [("time", 1, TS), ("query", 2, "string")],
    f"{Q}.DiffProfile": [("a", 1, f"{Q}.ProfileDiffSelection"), ("b", 2, f"{Q}.ProfileDiffSelection"),
                         ("absolute", 3, "optional bool")],
    f"{Q}.ProfileDiffSelection": [("mode", 1, f"{Q}.ProfileDiffSelection.Mode"), ("merge", 2, f"{Q}.MergeProfile"),
                                  ("single", 3, f"{Q}.SingleProfile")],
    f"{Q}.QueryRequest": [("mode", 1, f"{Q}.QueryRequest.Mode"), ("diff", 2, f"{Q}.DiffProfile"),
                          ("merge", 3, f"{Q}.MergeProfile"), ("single", 4, f"{Q}.SingleProfile"),
                          ("report_type", 5, f"{Q}.QueryRequest.ReportType"),
                          ("filter_query", 6, "optional string"), ("node_trim_threshold", 7, "optional float"),
                          ("group_by", 8, f"optional {Q}.GroupBy"),
                          ("source_reference", 9, f"optional {Q}.SourceReference"),
                          ("runtime_filter", 10, f"optional {Q}.RuntimeFilter"),
                          ("invert_call_stack", 11, "optional bool"), ("filter", 12, f"repeated {Q}.Filter"),
                          ("sandwich_by_function", 13, "optional string")],
    f"{Q}.GroupBy": [("fields", 1, "repeated string")],
    f"{Q}.SourceReference": [("build_id", 1, "string"), ("filename", 2, "string"), ("source_only", 3, "bool")],
    f"{Q}.RuntimeFilter": [("show_python", 1, "bool"), ("show_ruby", 2, "bool"),
                           ("show_interpreted_only", 3, "bool")],
    f"{Q}.Filter": [("stack_filter", 1, f"{Q}.StackFilter"), ("frame_filter", 2, f"{Q}.FrameFilter")],
    f"{Q}.StackFilter": [("function_name_stack_filter", 1, f"{Q}.FunctionNameStackFilter"),
                         ("criteria", 2, f"{Q}.FilterCriteria")],
    f"{Q}.FrameFilter": [("binary_frame_filter", 1, f"{Q}.BinaryFrameFilter"), ("criteria", 2, f"{Q}.FilterCriteria")],
    f"{Q}.FunctionNameStackFilter": [("function_to_filter", 1, "string"), ("exclude", 2, "bool")],
    f"{Q}.BinaryFrameFilter": [("include_binaries", 1, "repeated string")],
    f"{Q}.FilterCriteria": [("function_name", 1, f"{Q}.StringCondition"), ("system_name", 2, f"{Q}.StringCondition"),
                            ("binary", 3, f"{Q}.StringCondition"), ("filename", 4, f"{Q}.StringCondition"),
                            ("address", 5, f"{Q}.NumberCondition"), ("line_number", 6, f"{Q}.NumberCondition")],
    f"{Q}.StringCondition": [("equal", 1, "string"), ("not_equal", 2, "string"), ("contains", 3, "string"),
                             ("not_contains", 4, "string"), ("starts_with", 5, "string"),
                             ("not_starts_with", 6, "string")],
    f"{Q}.NumberCondition": [("equal", 1, "uint64"), ("not_equal", 2, "uint64")],
    f"{Q}.QueryResponse": [("flamegraph", 5, f"{Q}.Flamegraph"), ("pprof", 6, "bytes"), ("top", 7, f"{Q}.Top"),
                           ("callgraph", 8, f"{Q}.Callgraph"), ("flamegraph_arrow", 11, f"{Q}.FlamegraphArrow"),
                           ("source", 12, f"{Q}.Source"), ("table_arrow", 13, f"{Q}.TableArrow"),
                           ("profile_metadata", 14, f"{Q}.ProfileMetadata"), ("total", 9, "int64"),
                           ("filtered", 10, "int64")],
    f"{Q}.Top": [("list", 1, f"repeated {Q}.TopNode"), ("reported", 2, "int32"), ("total", 3, "int32"),
                 ("unit", 4, "string")],
    f"{Q}.TopNode": [("meta", 1, f"{Q}.TopNodeMeta"), ("cumulative", 2, "int64"), ("flat", 3, "int64"),
                     ("diff", 4, "int64")],
    f"{Q}.TopNodeMeta": [("location", 1, f"{MS}.Location"), ("mapping", 2, f"{MS}.Mapping"),
                         ("function", 3, f"{MS}.Function"), ("line", 4, f"{MS}.Line")],
    f"{Q}.Flamegraph": [("root", 1, f"{Q}.FlamegraphRootNode"), ("total", 2, "int64"), ("unit", 3, "string"),
                        ("height", 4, "int32"), ("string_table", 5, "repeated string"),
                        ("locations", 6, f"repeated {MS}.Location"), ("mapping", 7, f"repeated {MS}.Mapping"),
                        ("function", 8, f"repeated {MS}.Function"), ("untrimmed_total", 9, "int64"),
                        ("trimmed", 10, "int64")],
    f"{Q}.FlamegraphRootNode": [("cumulative", 1, "int64"), ("diff", 2, "int64"),
                                ("children", 3, f"repeated {Q}.FlamegraphNode")],
    f"{Q}.FlamegraphNode": [("meta", 1, f"{Q}.FlamegraphNodeMeta"), ("cumulative", 2, "int64"), ("diff", 3, "int64"),
                            ("children", 4, f"repeated {Q}.FlamegraphNode")],
    f"{Q}.FlamegraphNodeMeta": [("location", 1, f"{MS}.Location"), ("mapping", 2, f"{MS}.Mapping"),
                                ("function", 3, f"{MS}.Function"), ("line", 4, f"{MS}.Line"),
                                ("location_index", 5, "uint32"), ("line_index", 6, "uint32")],
    f"{Q}.FlamegraphArrow": [("record", 1, "bytes"), ("unit", 2, "string"), ("height", 3, "int32"),
                             ("trimmed", 4, "int64")],
    f"{Q}.Source": [("record", 1, "bytes"), ("source", 2, "string"), ("unit", 3, "string")],
    f"{Q}.TableArrow": [("record", 1, "bytes"), ("unit", 2, "string")],
    f"{Q}.ProfileMetadata": [("mapping_files", 1, "repeated string"), ("labels", 2, "repeated string")],
    f"{Q}.Callgraph": [("nodes", 1, f"repeated {Q}.CallgraphNode"), ("edges", 2, f"repeated {Q}.CallgraphEdge"),
                       ("cumulative", 3, "int64")],
    f"{Q}.CallgraphNode": [("id", 1, "string"), ("meta", 2, f"{Q}.CallgraphNodeMeta"), ("cumulative", 3, "int64"),
                           ("flat", 4, "int64")],
    f"{Q}.CallgraphNodeMeta": [("location", 1, f"{MS}.Location"), ("mapping", 2, f"{MS}.Mapping"),
                               ("function", 3, f"{MS}.Function"), ("line", 4, f"{MS}.Line")],
    f"{Q}.CallgraphEdge": [("id", 1, "string"), ("source", 2, "string"), ("target", 3, "string"),
                           ("cumulative", 4, "int64"), ("is_collapsed", 5, "bool")],
    f"{Q}.SeriesRequest": [("match", 1, "repeated string"), ("start", 2, TS), ("end", 3, TS)],
    f"{Q}.SeriesResponse": [],
    f"{Q}.LabelsRequest": [("match", 1, "repeated string"), ("start", 2, TS), ("end", 3, TS),
                           ("profile_type", 4, "optional string")],
    f"{Q}.LabelsResponse": [("label_names", 1, "repeated string"), ("warnings", 2, "repeated string")],
    f"{Q}.ValuesRequest": [("label_name", 1, "string"), ("match", 2, "repeated string"), ("start", 3, TS),
                           ("end", 4, TS), ("profile_type", 5, "optional string")],
    f"{Q}.ValuesResponse": [("label_values", 1, "repeated string"), ("warnings", 2, "repeated string")],
    f"{Q}.ShareProfileRequest": [("query_request", 1, f"{Q}.QueryRequest"), ("description", 2, "optional string")],
    f"{Q}.ShareProfileResponse": [("link", 1, "string")],
    f"{Q}.HasProfileDataRequest": [],
    f"{Q}.HasProfileDataResponse": [("has_data", 1, "bool")],
    # 1.4 parca.metastore.v1alpha1
    f"{MS}.Location": [("id", 1, "string"), ("address", 2, "uint64"), ("mapping_id", 4, "string"),
                       ("is_folded", 5, "bool"), ("lines", 6, f"repeated {MS}.Line"), ("mapping_index", 7, "uint32")],
    f"{MS}.Line": [("function_id", 1, "string"), ("line", 2, "int64"), ("function_index", 3, "uint32")],
    f"{MS}.Function": [("id", 1, "string"), ("start_line", 2, "int64"), ("name", 3, "string"),
                       ("system_name", 4, "string"), ("filename", 5, "string"), ("name_string_index", 6, "uint32"),
                       ("system_name_string_index", 7, "uint32"), ("filename_string_index", 8, "uint32")],
    f"{MS}.Mapping": [("id", 1, "string"), ("start", 2, "uint64"), ("limit", 3, "uint64"), ("offset", 4, "uint64"),
                      ("file", 5, "string"), ("build_id", 6, "string"), ("has_functions", 7, "bool"),
                      ("has_filenames", 8, "bool"), ("has_line_numbers", 9, "bool"),
                      ("has_inline_frames", 10, "bool"), ("file_string_index", 11, "uint32"),
                      ("build_id_string_index", 12, "uint32")],
    # 1.6 parca.scrape.v1alpha1
    f"{SC}.TargetsRequest": [("state", 1, f"{SC}.TargetsRequest.State")],
    f"{SC}.TargetsResponse": [("targets", 1, f"map<string,{SC}.Targets>")],
    f"{SC}.Targets": [("targets", 1, f"repeated {SC}.Target")],
    f"{SC}.Target": [("discovered_labels", 1, f"{PS}.LabelSet"), ("labels", 2, f"{PS}.LabelSet"),
                     ("last_error", 3, "string"), ("last_scrape", 4, TS), ("last_scrape_duration", 5, DUR),
                     ("url", 6, "string"), ("health", 7, f"{SC}.Target.Health")],
    # 1.2 parca.debuginfo.v1alpha1
    f"{DI}.ShouldInitiateUploadRequest": [("build_id", 1, "string"), ("hash", 2, "string"),
                                          ("force", 3, "bool"), ("type", 4, f"{DI}.DebuginfoType"),
                                          ("build_id_type", 5, f"{DI}.BuildIDType")],
    f"{DI}.ShouldInitiateUploadResponse": [("should_initiate_upload", 1, "bool"), ("reason", 2, "string")],
    f"{DI}.InitiateUploadRequest": [("build_id", 1, "string"), ("size", 2, "int64"), ("hash", 3, "string"),
                                    ("force", 4, "bool"), ("type", 5, f"{DI}.DebuginfoType"),
                                    ("build_id_type", 6, f"{DI}.BuildIDType")],
    f"{DI}.InitiateUploadResponse": [("upload_instructions", 1, f"{DI}.UploadInstructions")],
    f"{DI}.UploadInstructions": [("build_id", 1, "string"), ("upload_id", 2, "string"),
                                 ("upload_strategy", 3, f"{DI}.UploadInstructions.UploadStrategy"),
                                 ("signed_url", 4, "string"), ("type", 5, f"{DI}.DebuginfoType")],
    f"{DI}.MarkUploadFinishedRequest": [("build_id", 1, "string"), ("upload_id", 2, "string"),
                                        ("type", 3, f"{DI}.DebuginfoType")],
    f"{DI}.MarkUploadFinishedResponse": [],
    f"{DI}.UploadRequest": [("info", 1, f"{DI}.UploadInfo"), ("chunk_data", 2, "bytes")],
    f"{DI}.UploadInfo": [("build_id", 1, "string"), ("upload_id", 2, "string"),
                         ("type", 3, f"{DI}.DebuginfoType")],
    f"{DI}.UploadResponse": [("build_id", 1, "string"), ("size", 2, "uint64")],
    # Grafana Pyroscope's push.v1 (pyroscope-api.md)
    f"{PU}.PushRequest": [("series", 1, f"repeated {PU}.RawProfileSeries")],
    f"{PU}.PushResponse": [],
    f"{PU}.RawProfileSeries": [("labels", 1, f"repeated {PU}.LabelPair"),
                               ("samples", 2, f"repeated {PU}.RawSample")],
    f"{PU}.LabelPair": [("name", 1, "string"), ("value", 2, "string")],
    f"{PU}.RawSample": [("raw_profile", 1, "bytes"), ("ID", 2, "string")],
    # pprof
    f"{PP}.Profile": [("sample_type", 1, f"repeated {PP}.ValueType"), ("sample", 2, f"repeated {PP}.Sample"),
                      ("mapping", 3, f"repeated {PP}.Mapping"), ("location", 4, f"repeated {PP}.Location"),
                      ("function", 5, f"repeated {PP}.Function"), ("string_table", 6, "repeated string"),
                      ("drop_frames", 7, "int64"), ("keep_frames", 8, "int64"), ("time_nanos", 9, "int64"),
                      ("duration_nanos", 10, "int64"), ("period_type", 11, f"{PP}.ValueType"),
                      ("period", 12, "int64"), ("comment", 13, "repeated int64"),
                      ("default_sample_type", 14, "int64")],
    f"{PP}.ValueType": [("type", 1, "int64"), ("unit", 2, "int64")],
    f"{PP}.Sample": [("location_id", 1, "repeated uint64"), ("value", 2, "repeated int64"),
                     ("label", 3, f"repeated {PP}.Label")],
    f"{PP}.Label": [("key", 1, "int64"), ("str", 2, "int64"), ("num", 3, "int64"), ("num_unit", 4, "int64")],
    f"{PP}.Mapping": [("id", 1, "uint64"), ("memory_start", 2, "uint64"), ("memory_limit", 3, "uint64"),
                      ("file_offset", 4, "uint64"), ("filename", 5, "int64"), ("build_id", 6, "int64"),
                      ("has_functions", 7, "bool"), ("has_filenames", 8, "bool"), ("has_line_numbers", 9, "bool"),
                      ("has_inline_frames", 10, "bool")],
    f"{PP}.Location": [("id", 1, "uint64"), ("mapping_id", 2, "uint64"), ("address", 3, "uint64"),
                       ("line", 4, f"repeated {PP}.Line"), ("is_folded", 5, "bool")],
    f"{PP}.Line": [("function_id", 1, "uint64"), ("line", 2, "int64"), ("column", 3, "int64")],
    f"{PP}.Function": [("id", 1, "uint64"), ("name", 2, "int64"), ("system_name", 3, "int64"),
                       ("filename", 4, "int64"), ("start_line", 5, "int64")],
}

# Real (non-optional) oneofs: message -> {oneof: [fields]}.
ONEOFS = {
    f"{Q}.ProfileDiffSelection": {"options": ["merge", "single"]},
    f"{Q}.QueryRequest": {"options": ["diff", "merge", "single"]},
    f"{Q}.Filter": {"filter": ["stack_filter", "frame_filter"]},
    f"{Q}.StackFilter": {"filter": ["function_name_stack_filter", "criteria"]},
    f"{Q}.FrameFilter": {"filter": ["binary_frame_filter", "criteria"]},
    f"{Q}.StringCondition": {"condition": ["equal", "not_equal", "contains", "not_contains", "starts_with",
                                           "not_starts_with"]},
    f"{Q}.NumberCondition": {"condition": ["equal", "not_equal"]},
    f"{DI}.UploadRequest": {"data": ["info", "chunk_data"]},
    f"{Q}.QueryResponse": {"report": ["flamegraph", "pprof", "top", "callgraph", "flamegraph_arrow", "source",
                                      "table_arrow", "profile_metadata"]},
}

ENUMS = {
    f"{Q}.QueryRequest.Mode": [("MODE_SINGLE_UNSPECIFIED", 0), ("MODE_DIFF", 1), ("MODE_MERGE", 2)],
    f"{Q}.ProfileDiffSelection.Mode": [("MODE_SINGLE_UNSPECIFIED", 0), ("MODE_MERGE", 1)],
    f"{Q}.QueryRequest.ReportType": [("REPORT_TYPE_FLAMEGRAPH_UNSPECIFIED", 0), ("REPORT_TYPE_PPROF", 1),
                                     ("REPORT_TYPE_TOP", 2), ("REPORT_TYPE_CALLGRAPH", 3),
                                     ("REPORT_TYPE_FLAMEGRAPH_TABLE", 4), ("REPORT_TYPE_FLAMEGRAPH_ARROW", 5),
                                     ("REPORT_TYPE_SOURCE", 6), ("REPORT_TYPE_TABLE_ARROW", 7),
                                     ("REPORT_TYPE_PROFILE_METADATA", 8), ("REPORT_TYPE_FLAMECHART", 9)],
    f"{SC}.TargetsRequest.State": [("STATE_ANY_UNSPECIFIED", 0), ("STATE_ACTIVE", 1), ("STATE_DROPPED", 2)],
    f"{SC}.Target.Health": [("HEALTH_UNKNOWN_UNSPECIFIED", 0), ("HEALTH_GOOD", 1), ("HEALTH_BAD", 2)],
    f"{DI}.DebuginfoType": [("DEBUGINFO_TYPE_DEBUGINFO_UNSPECIFIED", 0), ("DEBUGINFO_TYPE_EXECUTABLE", 1),
                            ("DEBUGINFO_TYPE_SOURCES", 2), ("DEBUGINFO_TYPE_SOURCE_MAP", 3)],
    f"{DI}.BuildIDType": [("BUILD_ID_TYPE_UNKNOWN_UNSPECIFIED", 0), ("BUILD_ID_TYPE_GNU", 1),
                          ("BUILD_ID_TYPE_HASH", 2), ("BUILD_ID_TYPE_GO", 3),
                          ("BUILD_ID_TYPE_SOURCE_MAP_DEBUG_ID", 4)],
    f"{DI}.UploadInstructions.UploadStrategy": [("UPLOAD_STRATEGY_UNSPECIFIED", 0), ("UPLOAD_STRATEGY_GRPC", 1),
                                                ("UPLOAD_STRATEGY_SIGNED_URL", 2)],
}

# service -> [(method, input, output, client_streaming, server_streaming)]
SERVICES = {
    f"{PS}.ProfileStoreService": [
        ("WriteRaw", f"{PS}.WriteRawRequest", f"{PS}.WriteRawResponse", False, False),
        ("Write", f"{PS}.WriteRequest", f"{PS}.WriteResponse", True, True),
        ("WriteArrow", f"{PS}.WriteArrowRequest", f"{PS}.WriteArrowResponse", False, False),
    ],
    f"{PS}.AgentsService": [("Agents", f"{PS}.AgentsRequest", f"{PS}.AgentsResponse", False, False)],
    f"{Q}.QueryService": [(m, f"{Q}.{m}Request", f"{Q}.{m}Response", False, False)
                          for m in ("QueryRange", "Query", "Series", "ProfileTypes", "Labels", "Values",
                                    "ShareProfile", "HasProfileData")],
    f"{SC}.ScrapeService": [("Targets", f"{SC}.TargetsRequest", f"{SC}.TargetsResponse", False, False)],
    f"{PU}.PusherService": [("Push", f"{PU}.PushRequest", f"{PU}.PushResponse", False, False)],
    f"{DI}.DebuginfoService": [
        ("Upload", f"{DI}.UploadRequest", f"{DI}.UploadResponse", True, False),
        ("ShouldInitiateUpload", f"{DI}.ShouldInitiateUploadRequest", f"{DI}.ShouldInitiateUploadResponse",
         False, False),
        ("InitiateUpload", f"{DI}.InitiateUploadRequest", f"{DI}.InitiateUploadResponse", False, False),
        ("MarkUploadFinished", f"{DI}.MarkUploadFinishedRequest", f"{DI}.MarkUploadFinishedResponse",
         False, False),
    ],
}

MODULES = {
    PS: "parca.profilestore.v1alpha1.profilestore",
    MS: "parca.metastore.v1alpha1.metastore",
    Q: "parca.query.v1alpha1.query",
    SC: "parca.scrape.v1alpha1.scrape",
    DI: "parca.debuginfo.v1alpha1.debuginfo",
    PU: "push.v1.push",
    PP: "perftools.profiles.profile",
}


def main():
    from google.protobuf import descriptor_pool
    from google.protobuf.descriptor import FieldDescriptor as FD

    scalar = {
        "double": FD.TYPE_DOUBLE, "float": FD.TYPE_FLOAT, "int64": FD.TYPE_INT64, "uint64": FD.TYPE_UINT64,
        "int32": FD.TYPE_INT32, "uint32": FD.TYPE_UINT32, "bool": FD.TYPE_BOOL, "string": FD.TYPE_STRING,
        "bytes": FD.TYPE_BYTES,
    }
    errors = []
    checked = 0

    with tempfile.TemporaryDirectory() as out:
        subprocess.run([os.path.join(HERE, "gen_stubs.sh"), out], check=True)
        sys.path.insert(0, out)
        for mod in MODULES.values():
            importlib.import_module(mod + "_pb2")
            importlib.import_module(mod + "_pb2_grpc")
        pool = descriptor_pool.Default()

        def describe(f):
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                k = f.message_type.fields_by_name["key"]
                v = f.message_type.fields_by_name["value"]
                return f"map<{describe(k)},{describe(v)}>"
            if f.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
                base = f.message_type.full_name
            elif f.type == FD.TYPE_ENUM:
                base = f.enum_type.full_name
            else:
                base = next(n for n, t in scalar.items() if t == f.type)
            if f.label == FD.LABEL_REPEATED:
                return "repeated " + base
            oneof = f.containing_oneof
            if oneof is not None and oneof.name == "_" + f.name and len(oneof.fields) == 1:
                return "optional " + base
            return base

        # Every message in our packages must be covered by the table.
        for pkg, mod in MODULES.items():
            fd = pool.FindFileByName(mod.replace(".", "/") + ".proto")
            for name in fd.message_types_by_name:
                if f"{pkg}.{name}" not in MESSAGES:
                    errors.append(f"{pkg}.{name}: message not in the reference table")

        for msg, fields in MESSAGES.items():
            try:
                d = pool.FindMessageTypeByName(msg)
            except KeyError:
                errors.append(f"{msg}: message missing")
                continue
            want_names = {n for n, _, _ in fields}
            for extra in sorted(set(d.fields_by_name) - want_names):
                errors.append(f"{msg}.{extra}: field not in the reference")
            for name, number, typ in fields:
                checked += 1
                f = d.fields_by_name.get(name)
                if f is None:
                    errors.append(f"{msg}.{name}: field missing")
                    continue
                if f.number != number:
                    errors.append(f"{msg}.{name}: number {f.number}, want {number}")
                got = describe(f)
                if got != typ:
                    errors.append(f"{msg}.{name}: type {got}, want {typ}")
            want_oneofs = ONEOFS.get(msg, {})
            for o in d.oneofs:
                if o.name.startswith("_") and len(o.fields) == 1 and o.fields[0].name == o.name[1:]:
                    continue  # proto3 `optional`, checked through the field type
                want = want_oneofs.get(o.name)
                got = [f.name for f in o.fields]
                if want is None:
                    errors.append(f"{msg}: unexpected oneof {o.name} {got}")
                elif got != want:
                    errors.append(f"{msg}: oneof {o.name} is {got}, want {want}")
            for name in set(want_oneofs) - {o.name for o in d.oneofs}:
                errors.append(f"{msg}: oneof {name} missing")

        for enum, values in ENUMS.items():
            try:
                e = pool.FindEnumTypeByName(enum)
            except KeyError:
                errors.append(f"{enum}: enum missing")
                continue
            got = [(v.name, v.number) for v in e.values]
            checked += len(values)
            if got != values:
                errors.append(f"{enum}: values {got}, want {values}")

        for svc, methods in SERVICES.items():
            try:
                s = pool.FindServiceByName(svc)
            except KeyError:
                errors.append(f"{svc}: service missing")
                continue
            got = [(m.name, m.input_type.full_name, m.output_type.full_name, m.client_streaming,
                    m.server_streaming) for m in s.methods]
            checked += len(methods)
            if got != methods:
                errors.append(f"{svc}: methods {got}, want {methods}")

        # Presence: an explicitly false `optional` survives a round trip.
        q = importlib.import_module(MODULES[Q] + "_pb2")
        m = q.DiffProfile()
        m.absolute = False
        back = q.DiffProfile.FromString(m.SerializeToString())
        if not back.HasField("absolute") or q.DiffProfile().HasField("absolute"):
            errors.append("DiffProfile.absolute does not keep presence")

    for e in errors:
        print("MISMATCH", e)
    print(f"checked {checked} fields, enum values and methods across {len(MESSAGES)} messages: "
          f"{len(errors)} mismatches")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
