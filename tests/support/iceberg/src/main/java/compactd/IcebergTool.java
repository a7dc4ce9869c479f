package compactd;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.Metrics;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.PartitionKey;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.PartitionSpecParser;
import org.apache.iceberg.RewriteFiles;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SchemaParser;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SortOrder;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.InternalRecordWrapper;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetReaders;
import org.apache.iceberg.data.parquet.GenericParquetWriter;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.expressions.Evaluator;
import org.apache.iceberg.expressions.Expression;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.hadoop.HadoopTables;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.parquet.ParquetUtil;
import org.apache.iceberg.rest.RESTCatalog;
import org.apache.iceberg.types.Comparators;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;

/**
 * Java Iceberg (the reference implementation) as a writer and judge of the tables compactd
 * compacts: one JSON command per stdin line, one JSON answer per stdout line, until stdin closes.
 * Every answer is {"ok": true, ...} or {"ok": false, "error": ..., "type": ...}; a failing command
 * never ends the tool. Tables are file-system ("Hadoop") tables named by their location (a local
 * path or an hdfs:// URI), or a REST catalog's tables named by "rest" (its URI) and "table" (ns.t)
 * in place of "location" (commands that read).
 *
 * <p>Commands ("cmd"): create {location, schema (Iceberg's JSON), spec (JSON fields), properties}
 * append {location, rows [{col: value}], files, format?} (rows split over `files` files per
 * partition; format "avro" writes Avro data files, else Parquet)
 * read {location, snapshot?, filter?} -> {count, digest, lines?} snapshots {location} -> history
 * diff {location, snapshot} -> added/removed data files of a snapshot metrics {location} -> every
 * live data file's metrics beside ParquetUtil.fileMetrics' and its real length predicates
 * {location} -> per column and chosen literal, a filtered scan beside a full scan filtered here
 * (the mismatches listed) delete
 * {location, path} (RowDelta/DeleteFiles of one data file) posdelete {location, path, pos}
 * eqdelete {location, path, column, value} (an equality delete of rows whose column equals value,
 * in the partition of the data file at path)
 * rewrite {location, paths, validate_from?} (Java's own RewriteFiles of `paths`, live at
 * validate_from, into one file)
 * append_loop_start {location, appends, rows, start} / append_loop_wait
 */
public class IcebergTool {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Configuration CONF = new Configuration();
  private static final HadoopTables TABLES = new HadoopTables(CONF);
  private static Thread loop;
  private static final List<JsonNode> LOOP_RESULTS = new ArrayList<>();

  public static void main(String[] args) throws Exception {
    PrintStream proto = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
    System.setOut(System.err);
    ObjectNode ready = JSON.createObjectNode();
    ready.put("ready", true);
    proto.println(ready);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) continue;
      ObjectNode out;
      try {
        out = handle(JSON.readTree(line));
        out.put("ok", true);
      } catch (Throwable e) {
        e.printStackTrace();
        out = JSON.createObjectNode();
        out.put("ok", false);
        out.put("error", String.valueOf(e.getMessage()));
        out.put("type", e.getClass().getName());
      }
      proto.println(out);
    }
  }

  static ObjectNode handle(JsonNode c) throws Exception {
    String cmd = c.get("cmd").asText();
    switch (cmd) {
      case "create": return create(c);
      case "append": return append(c);
      case "read": return read(c);
      case "snapshots": return snapshots(c);
      case "diff": return diff(c);
      case "metrics": return metrics(c);
      case "predicates": return predicates(c);
      case "delete": return deleteFile(c);
      case "posdelete": return posDelete(c);
      case "eqdelete": return eqDelete(c);
      case "drop_partition_field": return dropPartitionField(c);
      case "upgrade": return upgrade(c);
      case "add_column": return addColumn(c);
      case "set_properties": return setProperties(c);
      case "rewrite_manifests": return rewriteManifests(c);
      case "expire_plan": return expirePlan(c);
      case "expire": return expire(c);
      case "unreachable": return unreachable(c);
      case "rewrite": return rewrite(c);
      case "append_loop_start": return loopStart(c);
      case "append_loop_wait": return loopWait();
      default: throw new IllegalArgumentException("unknown command " + cmd);
    }
  }

  /** REST catalogs by URI, each initialized once. */
  private static final Map<String, RESTCatalog> RESTS = new HashMap<>();

  /** The table a command names: `location` (a file-system table) or `rest` (a REST catalog's URI) and `table` (`ns.t`). */
  static Table load(JsonNode c) {
    if (c.has("rest")) {
      RESTCatalog cat = RESTS.computeIfAbsent(c.get("rest").asText(), uri -> {
        RESTCatalog r = new RESTCatalog();
        r.setConf(CONF);
        r.initialize("rest", Map.of("uri", uri));
        return r;
      });
      return cat.loadTable(TableIdentifier.parse(c.get("table").asText()));
    }
    return TABLES.load(c.get("location").asText());
  }

  static ObjectNode create(JsonNode c) {
    Schema schema = SchemaParser.fromJson(c.get("schema").toString());
    PartitionSpec spec = PartitionSpec.unpartitioned();
    if (c.has("spec")) {
      ObjectNode s = JSON.createObjectNode();
      s.put("spec-id", 0);
      s.set("fields", c.get("spec"));
      spec = PartitionSpecParser.fromJson(schema, s.toString());
    }
    Map<String, String> props = new HashMap<>();
    if (c.has("properties")) c.get("properties").fields().forEachRemaining(e -> props.put(e.getKey(), e.getValue().asText()));
    props.putIfAbsent(TableProperties.FORMAT_VERSION, "2");
    Table t = TABLES.create(schema, spec, SortOrder.unsorted(), props, c.get("location").asText());
    ObjectNode out = JSON.createObjectNode();
    out.put("location", t.location());
    return out;
  }

  /** A JSON value as the Java type Iceberg's generic records hold for `type`. */
  static Object value(Type type, JsonNode v) {
    if (v == null || v.isNull()) return null;
    switch (type.typeId()) {
      case BOOLEAN: return v.asBoolean();
      case INTEGER: return v.asInt();
      case LONG: return v.asLong();
      case FLOAT: return (float) v.asDouble();
      case DOUBLE: return v.asDouble();
      case STRING: return v.asText();
      case DATE: return LocalDate.parse(v.asText());
      case TIME: return java.time.LocalTime.parse(v.asText());
      case TIMESTAMP:
        return ((Types.TimestampType) type).shouldAdjustToUTC()
            ? OffsetDateTime.parse(v.asText())
            : LocalDateTime.parse(v.asText());
      case DECIMAL: return new BigDecimal(v.asText());
      case BINARY: return ByteBuffer.wrap(hex(v.asText()));
      case FIXED: return hex(v.asText());
      case UUID: return UUID.fromString(v.asText());
      case LIST: {
        List<Object> l = new ArrayList<>();
        Type e = type.asListType().elementType();
        for (JsonNode x : v) l.add(value(e, x));
        return l;
      }
      case MAP: {
        Map<Object, Object> m = new LinkedHashMap<>();
        Types.MapType mt = type.asMapType();
        v.fields().forEachRemaining(f -> m.put(value(mt.keyType(), JSON.getNodeFactory().textNode(f.getKey())), value(mt.valueType(), f.getValue())));
        return m;
      }
      case STRUCT: return record(type.asStructType(), v);
      default: throw new IllegalArgumentException("unsupported type " + type);
    }
  }

  static GenericRecord record(Types.StructType struct, JsonNode row) {
    GenericRecord r = GenericRecord.create(struct);
    for (Types.NestedField f : struct.fields()) r.setField(f.name(), value(f.type(), row.get(f.name())));
    return r;
  }

  static byte[] hex(String s) {
    byte[] b = new byte[s.length() / 2];
    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    return b;
  }

  static String hex(ByteBuffer b) {
    StringBuilder sb = new StringBuilder();
    ByteBuffer d = b.duplicate();
    while (d.hasRemaining()) sb.append(String.format("%02x", d.get()));
    return sb.toString();
  }

  static DataFile writeFile(Table t, PartitionKey key, List<Record> rows) throws Exception {
    return writeFile(t, key, rows, "parquet");
  }

  static DataFile writeFile(Table t, PartitionKey key, List<Record> rows, String format) throws Exception {
    return writeFile(t, t.spec(), key, rows, format);
  }
  static DataFile writeFile(Table t, PartitionSpec spec, PartitionKey key, List<Record> rows, String format) throws Exception {
    String name = UUID.randomUUID() + "." + format;
    String path = key == null || spec.isUnpartitioned()
        ? t.locationProvider().newDataLocation(name)
        : t.locationProvider().newDataLocation(spec, key, name);
    OutputFile out = t.io().newOutputFile(path);
    if (format.equals("avro")) {
      DataWriter<Record> a = org.apache.iceberg.avro.Avro.writeData(out)
          .schema(t.schema())
          .createWriterFunc(org.apache.iceberg.data.avro.DataWriter::create)
          .withSpec(spec)
          .withPartition(spec.isUnpartitioned() ? null : key)
          .overwrite()
          .build();
      try {
        for (Record r : rows) a.write(r);
      } finally {
        a.close();
      }
      return a.toDataFile();
    }
    DataWriter<Record> w = Parquet.writeData(out)
        .schema(t.schema())
        .createWriterFunc(GenericParquetWriter::create)
        .withSpec(spec)
        .withPartition(spec.isUnpartitioned() ? null : key)
        .metricsConfig(MetricsConfig.forTable(t))
        .setAll(t.properties())
        .overwrite()
        .build();
    try {
      for (Record r : rows) w.write(r);
    } finally {
      w.close();
    }
    return w.toDataFile();
  }

  /** Rows grouped by partition, each group split over `files` files. */
  static List<DataFile> writeRows(Table t, JsonNode rows, int files) throws Exception {
    return writeRows(t, rows, files, "parquet");
  }

  static List<DataFile> writeRows(Table t, JsonNode rows, int files, String format) throws Exception {
    return writeRows(t, rows, files, format, t.spec());
  }
  static List<DataFile> writeRows(Table t, JsonNode rows, int files, String format, PartitionSpec spec) throws Exception {
    Schema schema = t.schema();
    PartitionKey key = new PartitionKey(spec, schema);
    InternalRecordWrapper wrapper = new InternalRecordWrapper(schema.asStruct());
    Map<PartitionKey, List<Record>> groups = new LinkedHashMap<>();
    for (JsonNode row : rows) {
      GenericRecord r = record(schema.asStruct(), row);
      key.partition(wrapper.wrap(r));
      groups.computeIfAbsent(key.copy(), k -> new ArrayList<>()).add(r);
    }
    List<DataFile> out = new ArrayList<>();
    for (Map.Entry<PartitionKey, List<Record>> g : groups.entrySet()) {
      List<Record> all = g.getValue();
      int n = Math.max(1, Math.min(files, all.size()));
      for (int i = 0; i < n; i++) {
        List<Record> part = all.subList(i * all.size() / n, (i + 1) * all.size() / n);
        if (!part.isEmpty()) out.add(writeFile(t, spec, g.getKey(), part, format));
      }
    }
    return out;
  }

  static ObjectNode append(JsonNode c) throws Exception {
    Table t = load(c);
    // `spec_id`: the files are written in that spec, not the current one.
    PartitionSpec spec = c.has("spec_id") ? t.specs().get(c.get("spec_id").asInt()) : t.spec();
    List<DataFile> files = writeRows(t, c.get("rows"), c.has("files") ? c.get("files").asInt() : 1, c.path("format").asText("parquet"), spec);
    org.apache.iceberg.AppendFiles a = t.newAppend();
    for (DataFile f : files) a.appendFile(f);
    a.commit();
    ObjectNode out = JSON.createObjectNode();
    out.put("snapshot", t.currentSnapshot().snapshotId());
    out.put("files", files.size());
    return out;
  }

  /** A row as canonical JSON: columns sorted by name, values as text Iceberg's types print. */
  static JsonNode canonical(Type type, Object v) {
    if (v == null) return JSON.getNodeFactory().nullNode();
    switch (type.typeId()) {
      case STRUCT: {
        ObjectNode o = JSON.createObjectNode();
        Record r = (Record) v;
        TreeMap<String, JsonNode> sorted = new TreeMap<>();
        for (Types.NestedField f : type.asStructType().fields()) sorted.put(f.name(), canonical(f.type(), r.getField(f.name())));
        sorted.forEach(o::set);
        return o;
      }
      case LIST: {
        ArrayNode a = JSON.createArrayNode();
        for (Object x : (List<?>) v) a.add(canonical(type.asListType().elementType(), x));
        return a;
      }
      case MAP: {
        TreeMap<String, JsonNode> sorted = new TreeMap<>();
        for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) sorted.put(String.valueOf(e.getKey()), canonical(type.asMapType().valueType(), e.getValue()));
        ObjectNode o = JSON.createObjectNode();
        sorted.forEach(o::set);
        return o;
      }
      case BINARY: return JSON.getNodeFactory().textNode(hex((ByteBuffer) v));
      case FIXED: return JSON.getNodeFactory().textNode(hex(ByteBuffer.wrap((byte[]) v)));
      case TIMESTAMP:
        return JSON.getNodeFactory().textNode(v instanceof OffsetDateTime
            ? ((OffsetDateTime) v).withOffsetSameInstant(ZoneOffset.UTC).toLocalDateTime().toString()
            : v.toString());
      case DECIMAL: return JSON.getNodeFactory().textNode(((BigDecimal) v).toPlainString());
      case FLOAT:
      case DOUBLE:
      case INTEGER:
      case LONG:
      case BOOLEAN:
        return JSON.valueToTree(v);
      default: return JSON.getNodeFactory().textNode(v.toString());
    }
  }

  static List<String> lines(Table t, CloseableIterable<Record> rows, Schema schema) throws Exception {
    List<String> out = new ArrayList<>();
    try (CloseableIterable<Record> rs = rows) {
      for (Record r : rs) out.add(JSON.writeValueAsString(canonical(schema.asStruct(), r)));
    }
    java.util.Collections.sort(out);
    return out;
  }

  static String digest(List<String> lines) throws Exception {
    MessageDigest md = MessageDigest.getInstance("SHA-256");
    md.update(String.join("\n", lines).getBytes(StandardCharsets.UTF_8));
    StringBuilder sb = new StringBuilder();
    for (byte b : md.digest()) sb.append(String.format("%02x", b));
    return sb.toString();
  }

  static ObjectNode read(JsonNode c) throws Exception {
    Table t = load(c);
    IcebergGenerics.ScanBuilder b = IcebergGenerics.read(t);
    if (c.has("snapshot")) b = b.useSnapshot(c.get("snapshot").asLong());
    List<String> l = lines(t, b.build(), t.schema());
    ObjectNode out = JSON.createObjectNode();
    out.put("count", l.size());
    out.put("digest", digest(l));
    if (c.path("lines").asBoolean()) {
      ArrayNode a = out.putArray("lines");
      l.forEach(a::add);
    }
    Snapshot s = c.has("snapshot") ? t.snapshot(c.get("snapshot").asLong()) : t.currentSnapshot();
    int files = 0;
    try (CloseableIterable<FileScanTask> tasks = t.newScan().useSnapshot(s.snapshotId()).planFiles()) {
      for (FileScanTask ignored : tasks) files++;
    }
    out.put("files", files);
    return out;
  }

  static ObjectNode snapshots(JsonNode c) {
    Table t = load(c);
    ObjectNode out = JSON.createObjectNode();
    ArrayNode a = out.putArray("snapshots");
    for (Snapshot s : t.snapshots()) {
      ObjectNode o = a.addObject();
      o.put("id", s.snapshotId());
      if (s.parentId() != null) o.put("parent", s.parentId());
      o.put("operation", s.operation());
      o.put("sequence_number", s.sequenceNumber());
      o.set("summary", JSON.valueToTree(s.summary()));
    }
    if (t.currentSnapshot() != null) out.put("current", t.currentSnapshot().snapshotId());
    ArrayNode files = out.putArray("live");
    try (CloseableIterable<FileScanTask> tasks = t.newScan().planFiles()) {
      for (FileScanTask task : tasks) files.add(task.file().location());
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
    return out;
  }

  static ObjectNode diff(JsonNode c) {
    Table t = load(c);
    Snapshot s = t.snapshot(c.get("snapshot").asLong());
    ObjectNode out = JSON.createObjectNode();
    ArrayNode added = out.putArray("added");
    for (DataFile f : s.addedDataFiles(t.io())) {
      ObjectNode o = added.addObject();
      o.put("path", f.location());
      o.put("records", f.recordCount());
      o.put("size", f.fileSizeInBytes());
      o.put("data_sequence_number", f.dataSequenceNumber());
      o.put("file_sequence_number", f.fileSequenceNumber());
      o.put("spec_id", f.specId());
      o.put("partition", String.valueOf(f.partition()));
      if (f.sortOrderId() != null) o.put("sort_order_id", f.sortOrderId());
    }
    ArrayNode removed = out.putArray("removed");
    for (DataFile f : s.removedDataFiles(t.io())) {
      ObjectNode o = removed.addObject();
      o.put("path", f.location());
      o.put("records", f.recordCount());
      o.put("data_sequence_number", f.dataSequenceNumber());
    }
    out.put("operation", s.operation());
    out.put("sequence_number", s.sequenceNumber());
    return out;
  }

  static ObjectNode mapOf(Map<Integer, ?> m) {
    ObjectNode o = JSON.createObjectNode();
    if (m == null) return o;
    new TreeMap<>(m).forEach((k, v) -> {
      if (v instanceof ByteBuffer) o.put(String.valueOf(k), hex((ByteBuffer) v));
      else o.put(String.valueOf(k), String.valueOf(v));
    });
    return o;
  }

  /** Every live data file: its metrics as the manifest holds them, ParquetUtil.fileMetrics' under the table's MetricsConfig, and its real length. */
  static ObjectNode metrics(JsonNode c) throws Exception {
    Table t = load(c);
    MetricsConfig config = MetricsConfig.forTable(t);
    ObjectNode out = JSON.createObjectNode();
    ArrayNode files = out.putArray("files");
    try (CloseableIterable<FileScanTask> tasks = t.newScan().includeColumnStats().planFiles()) {
      for (FileScanTask task : tasks) {
        DataFile f = task.file();
        InputFile in = t.io().newInputFile(f.location());
        Metrics m = ParquetUtil.fileMetrics(in, config);
        ObjectNode o = files.addObject();
        o.put("path", f.location());
        o.put("length", in.getLength());
        o.put("size", f.fileSizeInBytes());
        ObjectNode stored = o.putObject("stored");
        stored.put("record_count", f.recordCount());
        stored.set("column_sizes", mapOf(f.columnSizes()));
        stored.set("value_counts", mapOf(f.valueCounts()));
        stored.set("null_value_counts", mapOf(f.nullValueCounts()));
        stored.set("nan_value_counts", mapOf(f.nanValueCounts()));
        stored.set("lower_bounds", mapOf(f.lowerBounds()));
        stored.set("upper_bounds", mapOf(f.upperBounds()));
        stored.put("split_offsets", String.valueOf(f.splitOffsets()));
        ObjectNode java = o.putObject("java");
        java.put("record_count", m.recordCount());
        java.set("column_sizes", mapOf(m.columnSizes()));
        java.set("value_counts", mapOf(m.valueCounts()));
        java.set("null_value_counts", mapOf(m.nullValueCounts()));
        java.set("nan_value_counts", mapOf(m.nanValueCounts()));
        java.set("lower_bounds", mapOf(m.lowerBounds()));
        java.set("upper_bounds", mapOf(m.upperBounds()));
        java.put("split_offsets", String.valueOf(ParquetUtil.getSplitOffsets(
            org.apache.parquet.hadoop.ParquetFileReader.open(org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
                new org.apache.hadoop.fs.Path(f.location()), CONF)).getFooter())));
      }
    }
    return out;
  }

  /**
   * For each primitive top-level column: a scan Iceberg filters (manifest metrics, then Parquet
   * row-group statistics and dictionaries, then rows) beside a full scan filtered here, compared
   * row for row. The literals are chosen, not sampled: the column's smallest and largest values,
   * its quartiles, and each live data file's own smallest and largest value (where pruning by
   * bounds or dictionaries decides), each under every comparison. Comparisons are ANDed with
   * notNull, SQL's meaning of `c < x`: Iceberg's row-level Evaluator orders nulls first (a null is
   * "< x"), while its file and row-group pruning never keeps a null for a comparison, so an
   * unguarded predicate counts the nulls of the files that survive pruning, whichever wrote them.
   */
  static ObjectNode predicates(JsonNode c) throws Exception {
    Table t = load(c);
    Schema schema = t.schema();
    InternalRecordWrapper w = new InternalRecordWrapper(schema.asStruct());
    List<Record> all = new ArrayList<>();
    try (CloseableIterable<Record> rs = IcebergGenerics.read(t).build()) {
      for (Record r : rs) all.add(r.copy());
    }
    // Each live file's rows, for its own smallest and largest values.
    List<List<Record>> perFile = new ArrayList<>();
    try (CloseableIterable<FileScanTask> tasks = t.newScan().planFiles()) {
      for (FileScanTask task : tasks) {
        List<Record> rows = new ArrayList<>();
        try (CloseableIterable<Record> rs = Parquet.read(t.io().newInputFile(task.file().location()))
            .project(schema)
            .createReaderFunc(s -> GenericParquetReaders.buildReader(schema, s))
            .build()) {
          for (Record r : rs) rows.add(r.copy());
        }
        perFile.add(rows);
      }
    }
    ObjectNode out = JSON.createObjectNode();
    ArrayNode checks = out.putArray("checks");
    int mismatches = 0;
    int count = 0;
    for (Types.NestedField f : schema.columns()) {
      if (!f.type().isPrimitiveType() || f.type().typeId() == Type.TypeID.BINARY || f.type().typeId() == Type.TypeID.FIXED) continue;
      int pos = schema.columns().indexOf(f);
      Comparator<Object> cmp = Comparators.forType(f.type().asPrimitiveType());
      List<Object> sorted = sortedValues(all, w, pos, cmp);
      TreeSet<Object> literals = new TreeSet<>(cmp);
      for (int q = 0; q <= 4 && !sorted.isEmpty(); q++) literals.add(sorted.get(q * (sorted.size() - 1) / 4));
      for (List<Record> rows : perFile) {
        List<Object> own = sortedValues(rows, w, pos, cmp);
        if (!own.isEmpty()) {
          literals.add(own.get(0));
          literals.add(own.get(own.size() - 1));
        }
      }
      List<Expression> exprs = new ArrayList<>();
      exprs.add(Expressions.isNull(f.name()));
      exprs.add(Expressions.notNull(f.name()));
      for (Object lit : literals) {
        Object next = literals.higher(lit) != null ? literals.higher(lit) : literals.first();
        for (Expression e : List.of(
            Expressions.equal(f.name(), lit),
            Expressions.notEqual(f.name(), lit),
            Expressions.lessThan(f.name(), lit),
            Expressions.lessThanOrEqual(f.name(), lit),
            Expressions.greaterThan(f.name(), lit),
            Expressions.greaterThanOrEqual(f.name(), lit),
            Expressions.in(f.name(), lit, next))) {
          exprs.add(Expressions.and(Expressions.notNull(f.name()), e));
        }
      }
      for (Expression e : exprs) {
        Evaluator eval = new Evaluator(schema.asStruct(), e, true);
        List<String> want = new ArrayList<>();
        for (Record r : all) if (eval.eval(w.wrap(r))) want.add(JSON.writeValueAsString(canonical(schema.asStruct(), r)));
        java.util.Collections.sort(want);
        List<String> got = lines(t, IcebergGenerics.read(t).where(e).build(), schema);
        count++;
        if (!got.equals(want)) {
          mismatches++;
          int files = 0;
          try (CloseableIterable<FileScanTask> tasks = t.newScan().filter(e).planFiles()) {
            for (FileScanTask ignored : tasks) files++;
          }
          ObjectNode o = checks.addObject();
          o.put("predicate", e.toString());
          o.put("want", want.size());
          o.put("got", got.size());
          o.put("files", files);
        }
      }
    }
    out.put("predicates", count);
    out.put("mismatches", mismatches);
    out.put("rows", all.size());
    return out;
  }

  /** The distinct non-null values of column `pos` of `rows`, as Iceberg's internal values (what literals bind to), sorted. */
  static List<Object> sortedValues(List<Record> rows, InternalRecordWrapper w, int pos, Comparator<Object> cmp) {
    TreeSet<Object> values = new TreeSet<>(cmp);
    for (Record r : rows) {
      Object v = w.wrap(r).get(pos, Object.class);
      if (v != null) values.add(v);
    }
    return new ArrayList<>(values);
  }

  static DataFile liveFile(Table t, String path) throws Exception {
    return liveFile(t, path, t.currentSnapshot().snapshotId());
  }

  /** The data file at `path` live in snapshot `at`. */
  static DataFile liveFile(Table t, String path, long at) throws Exception {
    try (CloseableIterable<FileScanTask> tasks = t.newScan().useSnapshot(at).planFiles()) {
      for (FileScanTask task : tasks) if (task.file().location().equals(path)) return task.file();
    }
    throw new IllegalArgumentException(path + " is not a live data file");
  }

  static ObjectNode deleteFile(JsonNode c) throws Exception {
    Table t = load(c);
    DataFile f = liveFile(t, c.get("path").asText());
    t.newDelete().deleteFile(f).commit();
    ObjectNode out = JSON.createObjectNode();
    out.put("snapshot", t.currentSnapshot().snapshotId());
    return out;
  }

  static ObjectNode posDelete(JsonNode c) throws Exception {
    Table t = load(c);
    // `paths`: one delete file naming row `pos` of each (all of one
    // partition), sorted by path as the spec asks; else `path`.
    List<String> paths = new ArrayList<>();
    if (c.has("paths")) c.get("paths").forEach(p -> paths.add(p.asText()));
    else paths.add(c.get("path").asText());
    Collections.sort(paths);
    DataFile f = liveFile(t, paths.get(0));
    OutputFile out = t.io().newOutputFile(t.locationProvider().newDataLocation(UUID.randomUUID() + "-deletes.parquet"));
    PositionDeleteWriter<Record> w = Parquet.writeDeletes(out)
        .createWriterFunc(GenericParquetWriter::create)
        .overwrite()
        .withSpec(t.specs().get(f.specId()))
        .withPartition(f.partition())
        .buildPositionWriter();
    PositionDelete<Record> d = PositionDelete.create();
    try {
      for (String p : paths) w.write(d.set(liveFile(t, p).location(), c.get("pos").asLong()));
    } finally {
      w.close();
    }
    DeleteFile df = w.toDeleteFile();
    t.newRowDelta().addDeletes(df).commit();
    ObjectNode o = JSON.createObjectNode();
    o.put("snapshot", t.currentSnapshot().snapshotId());
    return o;
  }

  /** Removes partition field `name` from the spec: a v1 table keeps it as a `void` field. */
  static ObjectNode dropPartitionField(JsonNode c) {
    Table t = load(c);
    t.updateSpec().removeField(c.get("name").asText()).commit();
    ObjectNode out = JSON.createObjectNode();
    out.put("spec_id", t.spec().specId());
    out.put("unpartitioned", t.spec().isUnpartitioned());
    return out;
  }

  /**
   * Adds column `name` of primitive type `type` (as the metadata writes it), `required` or not,
   * with the initial default `default` (its JSON single-value form; format v3) if given.
   */
  static ObjectNode addColumn(JsonNode c) {
    Table t = load(c);
    Type type = Types.fromPrimitiveString(c.get("type").asText());
    String name = c.get("name").asText();
    boolean required = c.path("required").asBoolean(false);
    org.apache.iceberg.UpdateSchema u = t.updateSchema();
    if (c.has("default")) {
      Object v = org.apache.iceberg.SingleValueParser.fromJson(type, c.get("default"));
      org.apache.iceberg.expressions.Literal<?> lit = org.apache.iceberg.expressions.Expressions.lit(v).to(type);
      if (required) u.addRequiredColumn(name, type, null, lit);
      else u.addColumn(name, type, null, lit);
    } else if (required) {
      u.allowIncompatibleChanges().addRequiredColumn(name, type);
    } else {
      u.addColumn(name, type);
    }
    u.commit();
    ObjectNode out = JSON.createObjectNode();
    out.put("schema", SchemaParser.toJson(t.schema()));
    return out;
  }

  /** Sets the table properties `properties` (an object of strings). */
  static ObjectNode setProperties(JsonNode c) {
    Table t = load(c);
    org.apache.iceberg.UpdateProperties u = t.updateProperties();
    c.get("properties").fields().forEachRemaining(e -> u.set(e.getKey(), e.getValue().asText()));
    u.commit();
    return JSON.createObjectNode();
  }

  /**
   * Java's own snapshot expiry with the given `older_than` (ms since the epoch) and `retain_last`, applied but not
   * committed: the snapshot ids it would expire (what `ExpireSnapshots.apply` returns).
   */
  static ObjectNode expirePlan(JsonNode c) {
    Table t = load(c);
    org.apache.iceberg.ExpireSnapshots e = t.expireSnapshots().expireOlderThan(c.get("older_than").asLong());
    if (c.has("retain_last")) e = e.retainLast(c.get("retain_last").asInt());
    ObjectNode out = JSON.createObjectNode();
    ArrayNode expired = out.putArray("expired");
    for (Snapshot s : e.apply()) expired.add(s.snapshotId());
    return out;
  }

  /** Java's own snapshot expiry, committed, its files deleted (for the retention benchmark). */
  static ObjectNode expire(JsonNode c) {
    Table t = load(c);
    org.apache.iceberg.ExpireSnapshots e = t.expireSnapshots().expireOlderThan(c.get("older_than").asLong());
    if (c.has("retain_last")) e = e.retainLast(c.get("retain_last").asInt());
    long start = System.nanoTime();
    e.commit();
    ObjectNode out = JSON.createObjectNode();
    out.put("seconds", (System.nanoTime() - start) / 1e9);
    return out;
  }

  /**
   * The files below the table's location that nothing the current metadata reaches names, as Iceberg's
   * `remove_orphan_files` finds them: reachable are the current and logged metadata files, the version hint, every
   * snapshot's manifest list and manifests and the files they list, and statistics files.
   */
  static ObjectNode unreachable(JsonNode c) {
    Table t = load(c);
    Set<String> reachable = new HashSet<>();
    java.util.function.Consumer<String> add = p -> reachable.add(new org.apache.hadoop.fs.Path(p).toUri().getPath());
    org.apache.iceberg.ReachableFileUtil.metadataFileLocations(t, false).forEach(add);
    add.accept(org.apache.iceberg.ReachableFileUtil.versionHintLocation(t));
    org.apache.iceberg.ReachableFileUtil.manifestListLocations(t).forEach(add);
    org.apache.iceberg.ReachableFileUtil.statisticsFilesLocations(t).forEach(add);
    for (Snapshot s : t.snapshots()) {
      for (org.apache.iceberg.ManifestFile m : s.allManifests(t.io())) {
        add.accept(m.path());
        try (CloseableIterable<String> paths = org.apache.iceberg.ManifestFiles.readPaths(m, t.io(), t.specs())) {
          paths.forEach(add);
        } catch (java.io.IOException ex) {
          throw new RuntimeException(ex);
        }
      }
    }
    ObjectNode out = JSON.createObjectNode();
    ArrayNode orphans = out.putArray("unreachable");
    int files = 0;
    try {
      org.apache.hadoop.fs.Path root = new org.apache.hadoop.fs.Path(t.location());
      org.apache.hadoop.fs.RemoteIterator<org.apache.hadoop.fs.LocatedFileStatus> it =
          root.getFileSystem(CONF).listFiles(root, true);
      while (it.hasNext()) {
        String p = it.next().getPath().toUri().getPath();
        String name = p.substring(p.lastIndexOf('/') + 1);
        // Hidden files (Hadoop's checksums) are not the table's, as remove_orphan_files skips them.
        if (name.startsWith(".") || name.startsWith("_")) continue;
        files++;
        if (!reachable.contains(p)) orphans.add(p);
      }
    } catch (java.io.IOException ex) {
      throw new RuntimeException(ex);
    }
    out.put("files", files);
    return out;
  }

  /** Java's own manifest rewrite: every manifest written again in the table's format version. */
  static ObjectNode rewriteManifests(JsonNode c) {
    Table t = load(c);
    t.rewriteManifests().rewriteIf(m -> true).commit();
    ObjectNode out = JSON.createObjectNode();
    out.put("snapshot", t.currentSnapshot().snapshotId());
    return out;
  }

  /** Upgrades the table to format `version`. */
  static ObjectNode upgrade(JsonNode c) {
    Table t = load(c);
    TableOperations ops = ((HasTableOperations) t).operations();
    TableMetadata base = ops.current();
    ops.commit(base, base.upgradeToFormatVersion(c.get("version").asInt()));
    ObjectNode out = JSON.createObjectNode();
    out.put("format_version", ops.refresh().formatVersion());
    return out;
  }

  /**
   * An equality delete of rows whose `column` equals `value`, in the partition of the data file
   * `path`, or with `"spec": "current"` in the table's current spec (unpartitioned there: a global
   * delete).
   */
  static ObjectNode eqDelete(JsonNode c) throws Exception {
    Table t = load(c);
    if (c.path("spec").asText().equals("current")) return eqDeleteIn(t, t.spec(), null, c);
    DataFile f = liveFile(t, c.get("path").asText());
    return eqDeleteIn(t, t.specs().get(f.specId()), f.partition(), c);
  }

  static ObjectNode eqDeleteIn(Table t, PartitionSpec spec, StructLike partition, JsonNode c) throws Exception {
    Types.NestedField field = t.schema().findField(c.get("column").asText());
    Schema deleteSchema = t.schema().select(field.name());
    OutputFile out = t.io().newOutputFile(t.locationProvider().newDataLocation(UUID.randomUUID() + "-eqdeletes.parquet"));
    org.apache.iceberg.deletes.EqualityDeleteWriter<Record> w = Parquet.writeDeletes(out)
        .forTable(t)
        .withSpec(spec)
        .withPartition(partition == null ? new PartitionKey(spec, t.schema()) : partition)
        .rowSchema(deleteSchema)
        .createWriterFunc(GenericParquetWriter::create)
        .equalityFieldIds(field.fieldId())
        .overwrite()
        .buildEqualityWriter();
    GenericRecord r = GenericRecord.create(deleteSchema);
    r.setField(field.name(), value(field.type(), c.get("value")));
    try {
      w.write(r);
    } finally {
      w.close();
    }
    t.newRowDelta().addDeletes(w.toDeleteFile()).commit();
    ObjectNode o = JSON.createObjectNode();
    o.put("snapshot", t.currentSnapshot().snapshotId());
    o.put("sequence_number", t.currentSnapshot().sequenceNumber());
    return o;
  }

  /** Java's own compaction of `paths` (live data files of one partition) into one file, committed with RewriteFiles validated from `validate_from` (default: the current snapshot). */
  static ObjectNode rewrite(JsonNode c) throws Exception {
    Table t = load(c);
    long from = c.has("validate_from") ? c.get("validate_from").asLong() : t.currentSnapshot().snapshotId();
    Set<DataFile> old = new HashSet<>();
    List<Record> rows = new ArrayList<>();
    PartitionKey key = new PartitionKey(t.spec(), t.schema());
    for (JsonNode p : c.get("paths")) {
      DataFile f = liveFile(t, p.asText(), from);
      old.add(f);
      try (CloseableIterable<Record> rs = Parquet.read(t.io().newInputFile(f.location()))
          .project(t.schema())
          .createReaderFunc(s -> GenericParquetReaders.buildReader(t.schema(), s))
          .build()) {
        for (Record r : rs) rows.add(r.copy());
      }
      for (int i = 0; i < t.spec().fields().size(); i++) key.set(i, f.partition().get(i, Object.class));
    }
    DataFile added = writeFile(t, key, rows);
    RewriteFiles r = t.newRewrite().validateFromSnapshot(from);
    for (DataFile f : old) r.deleteFile(f);
    r.addFile(added);
    r.dataSequenceNumber(t.snapshot(from).sequenceNumber());
    r.commit();
    ObjectNode out = JSON.createObjectNode();
    out.put("snapshot", t.currentSnapshot().snapshotId());
    out.put("added", added.location());
    return out;
  }

  /** Appends batches in a thread of its own, each committed as its own snapshot: columns batch, id (batch * rows + i) and part (i % parts). */
  static ObjectNode loopStart(JsonNode c) {
    String location = c.get("location").asText();
    int appends = c.get("appends").asInt();
    int rows = c.get("rows").asInt();
    int start = c.path("start").asInt(0);
    int parts = c.path("parts").asInt(2);
    synchronized (LOOP_RESULTS) {
      LOOP_RESULTS.clear();
    }
    loop = new Thread(() -> {
      for (int b = start; b < start + appends; b++) {
        ObjectNode o = JSON.createObjectNode();
        o.put("batch", b);
        try {
          Table t = TABLES.load(location);
          ArrayNode rs = JSON.createArrayNode();
          for (int i = 0; i < rows; i++) {
            ObjectNode r = rs.addObject();
            r.put("batch", b);
            r.put("id", (long) b * rows + i);
            r.put("part", "p" + (i % parts));
          }
          List<DataFile> files = writeRows(t, rs, 1);
          org.apache.iceberg.AppendFiles a = t.newAppend();
          for (DataFile f : files) a.appendFile(f);
          a.commit();
          o.put("ok", true);
        } catch (Throwable e) {
          e.printStackTrace();
          o.put("ok", false);
          o.put("error", String.valueOf(e.getMessage()));
        }
        synchronized (LOOP_RESULTS) {
          LOOP_RESULTS.add(o);
        }
      }
    });
    loop.start();
    return JSON.createObjectNode();
  }

  static ObjectNode loopWait() throws Exception {
    if (loop != null) loop.join();
    ObjectNode out = JSON.createObjectNode();
    ArrayNode a = out.putArray("batches");
    synchronized (LOOP_RESULTS) {
      LOOP_RESULTS.forEach(a::add);
    }
    return out;
  }

  static {
    // Conversions is referenced so that bounds' binary forms print the same way everywhere.
    Conversions.class.getName();
    StructLike.class.getName();
  }
}
