// A small Spark Connect JVM client (Spark's own spark-connect-client-jvm, from
// the PySpark distribution's jars/connect-repl) for the real-Spark tier: it runs
// SQL through a Spark Connect address and prints one JSON line per statement
// ({"sql", "rows", "first", "error", "secs"}), like the Go client, so the
// Python scenarios can assert on results. Exit status 1 when a statement failed.
// The statement "--pause" prints its line and waits for a line on stdin.
//
//   java -cp CLASSPATH JvmClient sc://127.0.0.1:15003 "select 1" "select 2"

import java.util.List;
import org.apache.spark.sql.Row;

public final class JvmClient {
  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') b.append('\\').append(c);
      else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
      else b.append(c);
    }
    return b.append('"').toString();
  }

  private static String value(Object v) {
    if (v == null) return "null";
    if (v instanceof Number || v instanceof Boolean) return v.toString();
    return quote(v.toString());
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      System.err.println("usage: JvmClient sc://HOST:PORT [SQL...]");
      System.exit(2);
    }
    org.apache.spark.sql.SparkSession spark =
        org.apache.spark.sql.connect.SparkSession.builder().remote(args[0]).create();
    boolean failed = false;
    java.io.BufferedReader stdin = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
    for (int i = 1; i < args.length; i++) {
      if (args[i].equals("--pause")) {
        System.out.println("{\"sql\":\"--pause\"}");
        System.out.flush();
        stdin.readLine();
        continue;
      }
      long start = System.nanoTime();
      StringBuilder line = new StringBuilder("{\"sql\":").append(quote(args[i]));
      try {
        List<Row> rows = spark.sql(args[i]).collectAsList();
        line.append(",\"rows\":").append(rows.size());
        if (!rows.isEmpty()) {
          Row r = rows.get(0);
          line.append(",\"first\":[");
          for (int k = 0; k < r.size(); k++) line.append(k > 0 ? "," : "").append(value(r.get(k)));
          line.append(']');
        }
      } catch (Exception e) {
        failed = true;
        line.append(",\"error\":").append(quote(e.getClass().getName() + ": " + e.getMessage()));
      }
      line.append(",\"secs\":").append((System.nanoTime() - start) / 1e9).append('}');
      System.out.println(line);
      System.out.flush();
    }
    spark.close();
    System.exit(failed ? 1 : 0);
  }
}
