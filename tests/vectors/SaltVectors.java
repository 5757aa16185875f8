// Independent test vectors for saltedtable's salt schemes, computed with the JDK itself (and Guava
// for FarmHash), never with the Python implementation under test.
//
// Usage (Java 17+, single-file launch; see README.md beside this file):
//   java SaltVectors.java --make-keys > keys.txt         # the fixed key set, one "HEX<TAB>label" a line
//   java -cp /usr/share/java/guava.jar SaltVectors.java keys.txt > salt_vectors.json
//   java SaltVectors.java --make-keys | java -cp /usr/share/java/guava.jar SaltVectors.java
// Input: one key a line, hex-encoded bytes, optionally followed by whitespace and a label; "-" or no
// argument reads stdin. Output: one JSON document on stdout.
//
// Guava (Debian: libguava-java) is optional and found by reflection: without it the FarmHash fields
// are null and a warning goes to stderr.

import java.io.BufferedReader;
import java.io.FileReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Reader;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;

public class SaltVectors {
    static final int[] JAVA_NS = {1, 2, 3, 4, 7, 10, 16, 100, 256, 1000};
    static final int[] PHOENIX_NS = {1, 2, 3, 4, 7, 10, 16, 100, 256};
    static final int[] DEFAULT_NS = {1, 2, 3, 4, 7, 10, 16, 100, 256, 1000};
    // Full salted keys are written out only up to this length; longer keys get prefixes only.
    static final int MAX_FULL_SALTED = 64;
    static final long SEED = 20240611L;

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("--make-keys")) {
            for (String[] k : makeKeys()) {
                System.out.println(k[0] + "\t" + k[1]);
            }
            return;
        }
        Reader in = (args.length == 0 || args[0].equals("-"))
                ? new InputStreamReader(System.in, StandardCharsets.UTF_8)
                : new FileReader(args[0], StandardCharsets.UTF_8);
        List<String[]> keys = new ArrayList<>();
        try (BufferedReader br = new BufferedReader(in)) {
            String line;
            while ((line = br.readLine()) != null) {
                line = line.strip();
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                String[] parts = line.split("\\s+", 2);
                keys.add(new String[] {parts[0], parts.length > 1 ? parts[1] : ""});
            }
        }
        Method farm = guavaFingerprint64();
        StringBuilder out = new StringBuilder();
        out.append("{\n");
        out.append("  \"generator\": \"tests/vectors/SaltVectors.java\",\n");
        out.append("  \"java_version\": ").append(q(System.getProperty("java.version"))).append(",\n");
        out.append("  \"farmhash_source\": ").append(
                farm == null ? "null" : q("Guava " + guavaVersion()
                        + " com.google.common.hash.Hashing.farmHashFingerprint64()")).append(",\n");
        out.append("  \"java_ns\": ").append(Arrays.toString(JAVA_NS)).append(",\n");
        out.append("  \"phoenix_ns\": ").append(Arrays.toString(PHOENIX_NS)).append(",\n");
        out.append("  \"default_ns\": ").append(Arrays.toString(DEFAULT_NS)).append(",\n");
        out.append("  \"max_full_salted\": ").append(MAX_FULL_SALTED).append(",\n");
        out.append("  \"vectors\": [\n");
        for (int i = 0; i < keys.size(); i++) {
            out.append(vector(unhex(keys.get(i)[0]), keys.get(i)[1], farm));
            out.append(i + 1 < keys.size() ? ",\n" : "\n");
        }
        out.append("  ]\n}\n");
        System.out.print(out);
    }

    static String vector(byte[] bytes, String label, Method farm) throws Exception {
        StringBuilder o = new StringBuilder("    {");
        o.append("\"label\": ").append(q(label));
        o.append(", \"key_hex\": ").append(q(hex(bytes)));
        String s = strictUtf8(bytes);
        o.append(", \"utf8\": ").append(s != null);

        // The Bigtable key-salting sample, verbatim:
        //   int prefix = rowKey.hashCode() % saltRange; String saltedRowKey = prefix + "-" + rowKey;
        if (s == null) {
            o.append(", \"java_hash\": null, \"java\": null");
        } else {
            o.append(", \"java_hash\": ").append(s.hashCode());
            o.append(", \"java\": ").append(javaSalts(s, s, bytes.length));
        }
        // The sample's partial-key variant hashes rowKey.substring(0, rowKey.lastIndexOf("-")).
        // '-' is one UTF-16 unit and one UTF-8 byte that never occurs inside a multi-byte sequence,
        // so the split is well defined for every valid UTF-8 key that contains it.
        if (s == null || s.lastIndexOf("-") < 0) {
            o.append(", \"java_before_last\": null");
        } else {
            String part = s.substring(0, s.lastIndexOf("-"));
            o.append(", \"java_before_last\": {\"hashed_hex\": ")
                    .append(q(hex(part.getBytes(StandardCharsets.UTF_8))))
                    .append(", \"hash\": ").append(part.hashCode())
                    .append(", \"salts\": ").append(javaSalts(part, s, bytes.length)).append("}");
        }

        int ah = Arrays.hashCode(bytes);
        o.append(", \"arrays_hash\": ").append(ah);
        o.append(", \"phoenix\": {");
        for (int i = 0; i < PHOENIX_NS.length; i++) {
            int n = PHOENIX_NS[i];
            // Phoenix / HBaseWD style: one raw salt byte, non-negative.
            int salt = Math.abs(ah % n);
            o.append(i == 0 ? "" : ", ").append(q(Integer.toString(n))).append(": ").append(salt);
        }
        o.append("}");

        CRC32 crc = new CRC32();
        crc.update(bytes);
        CRC32C crcc = new CRC32C();
        crcc.update(bytes);
        o.append(", \"crc32\": ").append(crc.getValue());
        o.append(", \"crc32_prefix\": ").append(defaultPrefixes(crc.getValue()));
        o.append(", \"crc32c\": ").append(crcc.getValue());
        o.append(", \"crc32c_prefix\": ").append(defaultPrefixes(crcc.getValue()));
        if (farm == null) {
            o.append(", \"farmhash\": null, \"farmhash_prefix\": null");
        } else {
            long fp = fingerprint64(farm, bytes);
            o.append(", \"farmhash\": ").append(Long.toUnsignedString(fp));
            o.append(", \"farmhash_prefix\": ").append(defaultPrefixesU64(fp));
        }
        o.append("}");
        return o.toString();
    }

    /** {"N": {"prefix": "-3-", "salted_hex": "..."}} with the sample's exact string concatenation. */
    static String javaSalts(String hashed, String rowKey, int keyLen) {
        StringBuilder o = new StringBuilder("{");
        for (int i = 0; i < JAVA_NS.length; i++) {
            int saltRange = JAVA_NS[i];
            int prefix = hashed.hashCode() % saltRange;
            String saltedRowKey = prefix + "-" + rowKey;
            o.append(i == 0 ? "" : ", ").append(q(Integer.toString(saltRange))).append(": {");
            o.append("\"prefix\": ").append(q(prefix + "-"));
            if (keyLen <= MAX_FULL_SALTED) {
                o.append(", \"salted_hex\": ")
                        .append(q(hex(saltedRowKey.getBytes(StandardCharsets.UTF_8))));
            }
            o.append("}");
        }
        return o.append("}").toString();
    }

    /** saltedtable's default format: zero-padded decimal bucket of width len(str(N-1)), then "-". */
    static String defaultPrefixes(long unsignedHash) {
        StringBuilder o = new StringBuilder("{");
        for (int i = 0; i < DEFAULT_NS.length; i++) {
            int n = DEFAULT_NS[i];
            long bucket = unsignedHash % n;
            o.append(i == 0 ? "" : ", ").append(q(Integer.toString(n))).append(": ")
                    .append(q(pad(bucket, n)));
        }
        return o.append("}").toString();
    }

    static String defaultPrefixesU64(long fp) {
        StringBuilder o = new StringBuilder("{");
        for (int i = 0; i < DEFAULT_NS.length; i++) {
            int n = DEFAULT_NS[i];
            long bucket = Long.remainderUnsigned(fp, n);
            o.append(i == 0 ? "" : ", ").append(q(Integer.toString(n))).append(": ")
                    .append(q(pad(bucket, n)));
        }
        return o.append("}").toString();
    }

    static String pad(long bucket, int n) {
        int width = Integer.toString(n - 1).length();
        return String.format("%0" + width + "d-", bucket);
    }

    static String strictUtf8(byte[] bytes) {
        try {
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes)).toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    static Method guavaFingerprint64() {
        try {
            Class<?> hashing = Class.forName("com.google.common.hash.Hashing");
            Object fn = hashing.getMethod("farmHashFingerprint64").invoke(null);
            Method hashBytes = Class.forName("com.google.common.hash.HashFunction")
                    .getMethod("hashBytes", byte[].class);
            FARM_FN = fn;
            return hashBytes;
        } catch (ReflectiveOperationException e) {
            System.err.println("warning: Guava not on the classpath; farmhash vectors are null "
                    + "(java -cp /usr/share/java/guava.jar SaltVectors.java ...)");
            return null;
        }
    }

    static Object FARM_FN;

    static long fingerprint64(Method hashBytes, byte[] bytes) throws Exception {
        Object hc = hashBytes.invoke(FARM_FN, (Object) bytes);
        return (long) Class.forName("com.google.common.hash.HashCode").getMethod("asLong").invoke(hc);
    }

    static String guavaVersion() {
        try (java.io.InputStream pom = Class.forName("com.google.common.hash.Hashing")
                .getResourceAsStream("/META-INF/maven/com.google.guava/guava/pom.properties")) {
            java.util.Properties p = new java.util.Properties();
            if (pom != null) {
                p.load(pom);
            }
            return p.getProperty("version", "(version unknown)");
        } catch (ReflectiveOperationException | IOException e) {
            return "(version unknown)";
        }
    }

    // ---- the key set ---------------------------------------------------------------------------

    static List<String[]> makeKeys() {
        List<String[]> keys = new ArrayList<>();
        String[] fixed = {
            "user123-site-1700000000", "user123-site-1700000001", "user123", "a", "b", "z", "0", "-",
            "a-", "-a", "a-b", "a--b", "abc-def-ghi", "sensor#42#1700000000", "tenant#7#user#9",
            "com.example.www/index.html", "phone#4c410523#20190501", "with space", "tab\there",
            "nul\u0000byte", "\u007f", "caf\u00e9", "caf\u00e9-42", "\u00e9", "\u65e5\u672c\u8a9e",
            "\u65e5\u672c\u8a9e-\u6771\u4eac-1", "\ud83d\ude00", "\ud83d\ude00-1",
            "x\ud83d\ude00y-\ud83d\ude00", "\ud83d\ude00\ud83d\ude00\ud83d\ude00#party",
            "\u0000", "\uffff", "\ud7ff", "\ue000", "\udbff\udfff", "\u0800", "\u0080",
            "Aa", "BB", "AaAa", "BBBB", "AaBB", "BBAa", // String.hashCode collisions
            "polygenelubricants", "polygenelubricants-2024", "polygenelubricants-a-b",
        };
        for (String f : fixed) {
            keys.add(new String[] {hex(f.getBytes(StandardCharsets.UTF_8)), "fixed"});
        }
        // Raw bytes: 0x80..0xff are negative as Java bytes, which Arrays.hashCode sees signed.
        for (int b : new int[] {0x00, 0x2d, 0x7f, 0x80, 0x81, 0xc3, 0xfe, 0xff}) {
            keys.add(new String[] {hex(new byte[] {(byte) b}), "bytes"});
        }
        keys.add(new String[] {"80ff7f00", "bytes"});
        keys.add(new String[] {"ffffffffffffffff", "bytes"});
        keys.add(new String[] {"c380", "bytes invalid utf-8 (overlong/truncated)"});
        keys.add(new String[] {"c0af", "bytes invalid utf-8 (overlong '/')"});
        keys.add(new String[] {"eda080", "bytes invalid utf-8 (CESU-encoded surrogate)"});
        keys.add(new String[] {"f4908080", "bytes invalid utf-8 (above U+10FFFF)"});
        keys.add(new String[] {"e6979c", "bytes invalid utf-8 (wrong continuation)"});
        keys.add(new String[] {"2d80", "bytes invalid utf-8 with '-'"});

        String minStr = findStringHashMin();
        keys.add(new String[] {hex(minStr.getBytes(StandardCharsets.UTF_8)),
            "string hashCode == Integer.MIN_VALUE (searched)"});
        keys.add(new String[] {hex((minStr + "-tail").getBytes(StandardCharsets.UTF_8)),
            "before_last hashCode == Integer.MIN_VALUE (searched)"});
        for (byte[] b : findArraysHashMin()) {
            keys.add(new String[] {hex(b), "Arrays.hashCode == Integer.MIN_VALUE (searched)"});
        }

        StringBuilder longKey = new StringBuilder();
        while (longKey.length() < 3072) {
            longKey.append("long-key-segment-").append(longKey.length()).append('#');
        }
        keys.add(new String[] {hex(longKey.toString().getBytes(StandardCharsets.UTF_8)), "long"});
        keys.add(new String[] {hex(("\u65e5\u672c\u8a9e\ud83d\ude00".repeat(128) + "-end")
                .getBytes(StandardCharsets.UTF_8)), "long non-ASCII"});
        byte[] longBytes = new byte[3000];
        new Random(SEED + 1).nextBytes(longBytes);
        keys.add(new String[] {hex(longBytes), "long random bytes"});

        Random r = new Random(SEED);
        for (int i = 0; i < 200; i++) {
            int kind = i % 4;
            int len = 1 + r.nextInt(24);
            byte[] b;
            String label;
            if (kind == 0) {
                StringBuilder sb = new StringBuilder();
                for (int j = 0; j < len; j++) {
                    sb.append((char) (0x20 + r.nextInt(0x5f)));
                }
                b = sb.toString().getBytes(StandardCharsets.UTF_8);
                label = "random printable ascii";
            } else if (kind == 1) {
                b = new byte[len];
                r.nextBytes(b);
                label = "random bytes";
            } else if (kind == 2) {
                StringBuilder sb = new StringBuilder();
                for (int j = 0; j < len; j++) {
                    int cp;
                    do {
                        int range = r.nextInt(4);
                        cp = range == 0 ? r.nextInt(0x80)
                                : range == 1 ? r.nextInt(0x800)
                                : range == 2 ? r.nextInt(0x10000) : 0x10000 + r.nextInt(0x100000);
                    } while (cp >= 0xd800 && cp <= 0xdfff);
                    sb.appendCodePoint(cp);
                }
                b = sb.toString().getBytes(StandardCharsets.UTF_8);
                label = "random unicode";
            } else {
                StringBuilder sb = new StringBuilder();
                int fields = 1 + r.nextInt(4);
                for (int f = 0; f < fields; f++) {
                    if (f > 0) {
                        sb.append(r.nextBoolean() ? '-' : '#');
                    }
                    int fl = 1 + r.nextInt(8);
                    for (int j = 0; j < fl; j++) {
                        sb.append(r.nextInt(5) == 0 ? (char) (0xe0 + r.nextInt(32))
                                : (char) ('a' + r.nextInt(26)));
                    }
                }
                b = sb.toString().getBytes(StandardCharsets.UTF_8);
                label = "random fields";
            }
            keys.add(new String[] {hex(b), label});
        }
        return keys;
    }

    /** A short lowercase ASCII string whose String.hashCode() is Integer.MIN_VALUE. */
    static String findStringHashMin() {
        if ("polygenelubricants".hashCode() != Integer.MIN_VALUE) {
            throw new AssertionError("polygenelubricants does not hash to MIN_VALUE");
        }
        // String.hashCode starts from 0 and sees chars; Arrays.hashCode starts from 1.
        byte[] b = solveHashMin(0, (byte) 'a', 26);
        String s = new String(b, StandardCharsets.US_ASCII);
        if (s.hashCode() != Integer.MIN_VALUE) {
            throw new AssertionError(s);
        }
        return s;
    }

    /** Byte strings whose Arrays.hashCode is Integer.MIN_VALUE: one ASCII, one with negative bytes. */
    static List<byte[]> findArraysHashMin() {
        List<byte[]> found = new ArrayList<>();
        found.add(solveHashMin(1, (byte) 'a', 26));
        found.add(solveHashMin(1, (byte) 0x80, 128));
        for (byte[] b : found) {
            if (Arrays.hashCode(b) != Integer.MIN_VALUE) {
                throw new AssertionError(hex(b));
            }
        }
        return found;
    }

    /**
     * The first 8-byte string (bytes in [base, base+span), counting up) whose polynomial hash
     * h = 31 * h + b from {@code init} is Integer.MIN_VALUE: enumerate 6 bytes, solve the last two.
     */
    static byte[] solveHashMin(int init, byte base, int span) {
        byte[] b = new byte[8];
        for (long n = 0; ; n++) {
            long x = n;
            for (int i = 5; i >= 0; i--) {
                b[i] = (byte) (base + x % span);
                x /= span;
            }
            int h = init;
            for (int i = 0; i < 6; i++) {
                h = 31 * h + b[i];
            }
            int target = Integer.MIN_VALUE - 961 * h; // need 31 * b6 + b7 == target (mod 2^32)
            for (int y0 = base; y0 < base + span; y0++) {
                int y1 = target - 31 * y0;
                if (y1 >= base && y1 < base + span) {
                    b[6] = (byte) y0;
                    b[7] = (byte) y1;
                    return b.clone();
                }
            }
        }
    }

    // ---- helpers -------------------------------------------------------------------------------

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder(b.length * 2);
        for (byte x : b) {
            sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return sb.toString();
    }

    static byte[] unhex(String s) {
        if (s.length() % 2 != 0) {
            throw new IllegalArgumentException("odd-length hex: " + s);
        }
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    static String q(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
