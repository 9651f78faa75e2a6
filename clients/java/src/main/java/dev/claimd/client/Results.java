package dev.claimd.client;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.protobuf.ByteString;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetEncoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * Results encodes what a handler returns by the rule every claimd guard shares
 * (clients/GUARD.md, "Results").
 */
public final class Results {
  private Results() {}

  // Compact, keys in the value's own order, nulls kept, no HTML escapes;
  // Gson refuses NaN and infinities by default.
  private static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();

  /**
   * encode turns a handler's value into the bytes to store: bytes ({@code byte[]},
   * {@link ByteBuffer}, {@link ByteString}) as they are, a {@link CharSequence}
   * as its UTF-8, null as empty, any other value as compact JSON in UTF-8 (Gson:
   * maps, lists, records, beans, numbers, booleans, Gson's JsonElement).
   *
   * @throws IllegalArgumentException when the value cannot be encoded: a lone
   *     surrogate, NaN or an infinity, a cycle, a type Gson cannot write
   */
  public static byte[] encode(Object value) {
    if (value == null) {
      return new byte[0];
    }
    if (value instanceof byte[] b) {
      return b;
    }
    if (value instanceof ByteBuffer bb) {
      ByteBuffer d = bb.duplicate();
      byte[] out = new byte[d.remaining()];
      d.get(out);
      return out;
    }
    if (value instanceof ByteString bs) {
      return bs.toByteArray();
    }
    if (value instanceof CharSequence cs) {
      return strictUtf8(cs);
    }
    String json;
    try {
      json = GSON.toJson(value);
    } catch (StackOverflowError e) {
      throw new IllegalArgumentException("result is not encodable as JSON: a cycle or too deep", e);
    } catch (RuntimeException e) {
      throw new IllegalArgumentException("result is not encodable as JSON: " + e.getMessage(), e);
    }
    return strictUtf8(unescapeLineSeparators(json));
  }

  /**
   * failureText is a failure's text as stored with FAILED: its message (the
   * class's simple name when the message is empty) in UTF-8, cut to at most
   * max bytes on a character boundary.
   */
  public static byte[] failureText(Throwable t, int max) {
    String m = t.getMessage();
    if (m == null || m.isEmpty()) {
      m = t.getClass().getSimpleName();
    }
    return truncateUtf8(m, max);
  }

  /** truncateUtf8 encodes s (a lone surrogate as U+FFFD) and cuts it to at most max bytes on a character boundary. */
  static byte[] truncateUtf8(String s, int max) {
    StringBuilder sb = new StringBuilder(s.length());
    for (int i = 0; i < s.length(); ) {
      int cp = s.codePointAt(i);
      i += Character.charCount(cp);
      sb.appendCodePoint(Character.isSurrogate((char) cp) && cp < 0x10000 ? 0xFFFD : cp);
    }
    byte[] all = sb.toString().getBytes(StandardCharsets.UTF_8);
    if (all.length <= max) {
      return all;
    }
    int n = max;
    while (n > 0 && (all[n] & 0xC0) == 0x80) {
      n--; // all[n] continues a character: cut before that character
    }
    byte[] out = new byte[n];
    System.arraycopy(all, 0, out, 0, n);
    return out;
  }

  private static byte[] strictUtf8(CharSequence cs) {
    CharsetEncoder enc = StandardCharsets.UTF_8.newEncoder()
        .onMalformedInput(CodingErrorAction.REPORT)
        .onUnmappableCharacter(CodingErrorAction.REPORT);
    try {
      ByteBuffer bb = enc.encode(CharBuffer.wrap(cs));
      byte[] out = new byte[bb.remaining()];
      bb.get(out);
      return out;
    } catch (CharacterCodingException e) {
      throw new IllegalArgumentException("result is not encodable as UTF-8: a lone surrogate", e);
    }
  }

  /**
   * unescapeLineSeparators writes U+2028 and U+2029 as themselves, as every
   * other claimd guard does: Gson always escapes them (for JavaScript embedding).
   * A backslash that is itself escaped does not start an escape.
   */
  private static String unescapeLineSeparators(String json) {
    if (!json.contains("\\u202")) {
      return json;
    }
    StringBuilder sb = new StringBuilder(json.length());
    for (int i = 0; i < json.length(); i++) {
      char c = json.charAt(i);
      if (c == '\\' && i + 1 < json.length()) {
        if (json.startsWith("u2028", i + 1) || json.startsWith("u2029", i + 1)) {
          sb.append(json.charAt(i + 5) == '8' ? '\u2028' : '\u2029');
          i += 5;
          continue;
        }
        sb.append(c).append(json.charAt(i + 1));
        i++;
        continue;
      }
      sb.append(c);
    }
    return sb.toString();
  }
}
